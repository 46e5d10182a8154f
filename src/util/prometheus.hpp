// SPDX-License-Identifier: Apache-2.0
// Prometheus' text exposition format (version 0.0.4), written out: families with their HELP and
// TYPE lines, samples with escaped label values, histograms from per-bucket counts. Pure text,
// no socket: the target's and the engine's metrics are rendered with it and tested as text.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nvtcp::prometheus {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class Type : uint8_t { Counter, Gauge, Histogram };

// A label value as the format wants it: backslash, double quote and line feed escaped.
std::string escape_label_value(std::string_view v);
// HELP text: backslash and line feed escaped (quotes stay).
std::string escape_help(std::string_view v);
// A sample value: integers exactly, other numbers in the shortest form that reads back the
// same; +Inf, -Inf and NaN by name.
std::string format_value(double v);
// A histogram bound as a decimal with no exponent and no trailing zeros ("0.00025", "1", "2.5").
std::string format_bound(double v);

class TextWriter {
 public:
  // Starts a family (once per name: samples of one family must be together): its HELP and TYPE.
  void family(std::string_view name, Type type, std::string_view help);
  // A sample of the current counter or gauge family.
  void sample(const Labels& labels, uint64_t value);
  void sample(const Labels& labels, double value);
  // A histogram of the current family: bounds (increasing, without +Inf), counts per bucket
  // (not cumulative: counts[i] is the observations in (bounds[i-1], bounds[i]], and the last,
  // counts[bounds.size()], those above every bound), and the sum of the observations. Writes
  // the cumulative _bucket lines (le="+Inf" last), _sum and _count.
  void histogram(const Labels& labels, std::span<const double> bounds, std::span<const uint64_t> counts, double sum);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void line(std::string_view suffix, const Labels& labels, const std::pair<std::string, std::string>* extra,
            std::string_view value);
  std::string out_;
  std::string name_;
};

}  // namespace nvtcp::prometheus
