// SPDX-License-Identifier: Apache-2.0
#include "util/prometheus.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace nvtcp::prometheus {

namespace {
const char* type_name(Type t) {
  switch (t) {
    case Type::Counter: return "counter";
    case Type::Gauge: return "gauge";
    case Type::Histogram: return "histogram";
  }
  return "untyped";
}
}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Whole numbers that a double holds exactly print without a fraction or exponent.
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) return fmt::format("{}", int64_t(v));
  return fmt::format("{}", v);
}

std::string format_bound(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::string s = fmt::format("{:.9f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

void TextWriter::family(std::string_view name, Type type, std::string_view help) {
  name_.assign(name);
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(help), name, type_name(type));
}

void TextWriter::line(std::string_view suffix, const Labels& labels, const std::pair<std::string, std::string>* extra,
                      std::string_view value) {
  out_ += name_;
  out_ += suffix;
  if (!labels.empty() || extra) {
    out_ += '{';
    bool first = true;
    auto put = [&](const std::pair<std::string, std::string>& l) {
      if (!first) out_ += ',';
      first = false;
      out_ += l.first;
      out_ += "=\"";
      out_ += escape_label_value(l.second);
      out_ += '"';
    };
    for (const auto& l : labels) put(l);
    if (extra) put(*extra);
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void TextWriter::sample(const Labels& labels, uint64_t value) { line("", labels, nullptr, fmt::format("{}", value)); }

void TextWriter::sample(const Labels& labels, double value) { line("", labels, nullptr, format_value(value)); }

void TextWriter::histogram(const Labels& labels, std::span<const double> bounds, std::span<const uint64_t> counts,
                           double sum) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    const std::pair<std::string, std::string> le{
        "le", i < bounds.size() ? format_bound(bounds[i]) : std::string("+Inf")};
    line("_bucket", labels, &le, fmt::format("{}", cumulative));
  }
  line("_sum", labels, nullptr, format_value(sum));
  line("_count", labels, nullptr, fmt::format("{}", cumulative));
}

}  // namespace nvtcp::prometheus
