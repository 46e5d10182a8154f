#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.tshark: does Wireshark's NVMe/TCP dissector (Debian's tshark 4.0.x) decode the traffic
# that nvtcp really sends?
#
#   tshark_test.sh path/to/nvtcp
#
# Two captures on lo, each against its own `nvtcp target` on a free port in 20000-40000 (decoded
# with -d tcp.port==PORT,nvme-tcp; neither 4420 nor 8009 is used):
#
#   plain   digests off; default MAXH2CDATA. discover + identify (admin CapsuleCmd, C2HData),
#           4 KiB randrw (in-capsule writes, C2HData reads), 64 KiB randwrite (R2T + H2CData), and a
#           garbage 8-byte PDU header (type 0x0a) that the target answers with a C2HTermReq.
#   digest  --hdgst --ddgst everywhere; MAXH2CDATA 16 KiB, so a 64 KiB write needs several R2T/H2CData
#           exchanges and H2CData PDUs at non-zero offsets.
#           Same traffic, plus a negative control: an ICReq asking for digests followed by a
#           CapsuleCmd whose header digest is wrong. The target must answer with a C2HTermReq
#           (FES 3) and tshark must flag exactly that one PDU with nvme-tcp.hdgst.status == 0,
#           which shows that the digest check below can fail.
#
# Each capture must show every PDU type (ICReq, ICResp, CapsuleCmd on the admin and I/O queues,
# CapsuleResp, C2HData with the SUCCESS flag, R2T, H2CData, in-capsule writes, C2HTermReq), no
# _ws.malformed, no error-level expert info, no nvme-tcp.unknown_data, no unknown PDU type, Connect
# with the expected subnqn/hostnqn, every CQE status 0, R2T and H2CData offset/length fields, and in
# the digest run HDGSTF/DDGSTF on the right PDUs with every digest verified good. Packets dropped by
# the capture, or TCP segments it missed, fail the test: a lossy capture proves nothing.
#
# Runs as root (CI is root); otherwise prints SKIP and exits 77. tshark comes from `make deps`. Set NVTCP_INTEROP_KEEP=1 to keep the captures and logs (they are kept on failure).
set -euo pipefail

NVTCP=${1:?usage: tshark_test.sh path/to/nvtcp}
NVTCP=$(readlink -f "$NVTCP")
[[ -x $NVTCP ]] || { echo "FAIL: $NVTCP is not an executable" >&2; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: interop.tshark needs root (packet capture on lo)"
  exit 77
fi

START=$SECONDS
NQN=nqn.2026-11.io.nvtcp:tshark
DISC_NQN=nqn.2014-08.org.nvmexpress.discovery
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:7d1c2f3e-0b5a-4c8e-9f21-3a6b4d5e6f70
# A fixed number of I/Os at a fixed pace, so that a capture holds the same traffic on a fast idle
# machine and on a loaded 2-core one: dumpcap drops packets when I/O outruns it, and the load
# that decides how fast it can write is the machine's, not ours. 256 4K I/Os at 1000/s and 128 64K
# writes at 250/s (16 MB/s) take about 0.8 s in all; --time only bounds a stalled run.
PERF_QD=4
PERF_4K=(--number-ios 256 --rate-iops 1000 -t 20)
PERF_64K=(--number-ios 128 --rate-iops 250 -t 20)

WORK=$(mktemp -d /tmp/nvtcp-tshark.XXXXXX)
TARGET_PID=""
CAP_PID=""
DROPPED=""
FAILURES=0

log() { printf '%s\n' "$*"; }
fail() { FAILURES=$((FAILURES + 1)); printf 'FAIL: %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*"; exit 1; }

cleanup() {
  local rc=$?
  set +e
  if [[ -n $CAP_PID ]] && kill -0 "$CAP_PID" 2>/dev/null; then
    kill -INT "$CAP_PID"; wait "$CAP_PID" 2>/dev/null
  fi
  if [[ -n $TARGET_PID ]] && kill -0 "$TARGET_PID" 2>/dev/null; then
    kill -INT "$TARGET_PID"
    for _ in $(seq 50); do kill -0 "$TARGET_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$TARGET_PID" 2>/dev/null
    wait "$TARGET_PID" 2>/dev/null
  fi
  if [[ $rc -ne 0 || ${NVTCP_INTEROP_KEEP:-0} == 1 ]]; then
    echo "captures and logs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tshark --------------------------------------------------------------------------------------

ensure_tshark() {
  command -v tshark >/dev/null && command -v dumpcap >/dev/null && return 0
  die "tshark/dumpcap are missing: \`make deps\` installs them (package tshark)"
}
ensure_tshark
TSHARK_VERSION=$(tshark --version 2>/dev/null | head -1)
log "using $TSHARK_VERSION"

# Every field this script reads, checked against the dissector's own list so that a renamed field
# fails loudly instead of silently matching nothing.
FIELDS=(
  frame.number tcp.stream tcp.srcport tcp.dstport _ws.expert.severity
  nvme-tcp.type nvme-tcp.flags nvme-tcp.hlen nvme-tcp.pdo nvme-tcp.plen
  nvme-tcp.hdgst.status nvme-tcp.ddgst.status nvme-tcp.cmd.qid
  nvme-tcp.icreq.digest nvme-tcp.icresp.digest nvme-tcp.icresp.maxdata
  nvme-tcp.r2t.offset nvme-tcp.r2t.length nvme-tcp.data.offset nvme-tcp.data.length
  nvme-tcp.c2htermreq.fes nvme-tcp.c2htermreq.data
  nvme.cmd.opc nvme.cmd.sgl.type nvme.cmd.sgl.subtype nvme.cmd.get_logpage.dword10.id
  nvme.fabrics.cmd.fctype nvme.fabrics.cmd.connect.qid nvme.fabrics.cmd.connect.cattr.dfc
  nvme.fabrics.cmd.connect.data.subnqn nvme.fabrics.cmd.connect.data.hostnqn nvme.cqe.status
  nvme-tcp.flags.pdu.hdgst nvme-tcp.flags.pdu.ddgst nvme-tcp.flags.pdu.data_last
  nvme-tcp.flags.pdu.data_success
)
FILTER_FIELDS=(_ws.malformed _ws.expert.message nvme-tcp.unknown_data tcp.analysis.lost_segment
               tcp.analysis.ack_lost_segment)
tshark -G fields 2>/dev/null | awk -F'\t' '$1 == "F" || $1 == "P" { print $3 }' | sort -u >"$WORK/fields.txt"
for f in "${FIELDS[@]}" "${FILTER_FIELDS[@]}"; do
  grep -qxF -- "$f" "$WORK/fields.txt" || die "tshark ($TSHARK_VERSION) has no field '$f'"
done

# --- helpers -------------------------------------------------------------------------------------

port_in_use() {  # any TCP socket (listening or connected) on this local or remote port
  if command -v ss >/dev/null; then
    [[ -n $(ss -Htan "( sport = :$1 or dport = :$1 )") ]]
  else  # no iproute2: /proc/net/tcp{,6} columns 2 and 3 are ADDR:PORT in hex
    local hexport; hexport=$(printf ':%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p="$hexport" \
      'NR > 1 && (substr($2, length($2) - 4) == p || substr($3, length($3) - 4) == p) { f = 1 } END { exit !f }'
  fi
}
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 20001))
    [[ $p -eq 4420 || $p -eq 8009 ]] && continue
    [[ $# -gt 0 && " $* " == *" $p "* ]] && continue
    port_in_use "$p" || { echo "$p"; return 0; }
  done
  echo "FAIL: no free port in 20000-40000" >&2
  return 1
}

# start_target NAME [target options...]: sets PORT and TARGET_PID.
start_target() {
  local name=$1; shift
  for attempt in 1 2 3 4 5; do
    PORT=$(free_port)
    rm -f "$WORK/$name.ready"
    "$NVTCP" target --listen "127.0.0.1:$PORT" --discovery-port 0 --ram 64M --nqn "$NQN" \
      --ready-file "$WORK/$name.ready" --log-level info "$@" >"$WORK/$name.target.log" 2>&1 &
    TARGET_PID=$!
    for _ in $(seq 100); do
      [[ -s $WORK/$name.ready ]] && return 0
      kill -0 "$TARGET_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$TARGET_PID" 2>/dev/null && die "target did not become ready in 10 s (see $WORK/$name.target.log)"
    wait "$TARGET_PID" || true
    TARGET_PID=""
    log "target failed to start on port $PORT (attempt $attempt): $(tail -1 "$WORK/$name.target.log")"
  done
  die "could not start the target"
}

stop_target() {
  local name=$1 rc=0
  kill -INT "$TARGET_PID"
  for _ in $(seq 50); do kill -0 "$TARGET_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$TARGET_PID" 2>/dev/null && { fail "$name: target ignored SIGINT for 5 s"; kill -KILL "$TARGET_PID"; }
  wait "$TARGET_PID" || rc=$?
  TARGET_PID=""
  [[ $rc -eq 0 ]] || fail "$name: target exited with status $rc (see $WORK/$name.target.log)"
}

# start_capture NAME: dumpcap on lo for PORT and a sentinel port SENT; returns once a sentinel SYN
# (to the closed port SENT) is in the file, i.e. once the capture really runs.
start_capture() {
  local name=$1 pcap=$WORK/$1.pcapng
  SENT=$(free_port "$PORT")
  dumpcap -i lo -B 64 -f "tcp port $PORT or tcp port $SENT" -w "$pcap" -q 2>"$WORK/$name.dumpcap.log" &
  CAP_PID=$!
  local deadline=$((SECONDS + 30)) last=-1 size
  while :; do
    kill -0 "$CAP_PID" 2>/dev/null || die "$name: dumpcap exited: $(cat "$WORK/$name.dumpcap.log")"
    (exec 3<>"/dev/tcp/127.0.0.1/$SENT") 2>/dev/null && die "$name: sentinel port $SENT accepted a connection"
    size=$(stat -c %s "$pcap" 2>/dev/null || echo 0)
    if [[ $size -ne $last && $size -gt 0 ]]; then
      last=$size
      [[ -n $(tshark -r "$pcap" -c 1 -Y "tcp.port == $SENT" 2>/dev/null) ]] && return 0
    fi
    [[ $SECONDS -lt $deadline ]] || die "$name: the capture did not see the sentinel SYN in 30 s"
    sleep 0.1
  done
}

stop_capture() {
  local name=$1 stats
  sleep 0.5  # the last FIN/ACKs
  kill -INT "$CAP_PID"
  wait "$CAP_PID" || true
  CAP_PID=""
  stats=$(grep -a 'Packets received/dropped' "$WORK/$name.dumpcap.log" || true)
  # Packets received/dropped on interface 'Loopback: lo': 4535/0 (pcap:0/dumpcap:0/flushed:0/ps_ifdrop:0) (100.0%)
  if [[ $stats =~ :\ ([0-9]+)/([0-9]+)\ \(pcap:([0-9]+)/dumpcap:([0-9]+)/flushed:([0-9]+)/ps_ifdrop:([0-9]+)\) ]]; then
    CAPTURED=${BASH_REMATCH[1]}
    local dropped=$((BASH_REMATCH[2] + BASH_REMATCH[3] + BASH_REMATCH[4] + BASH_REMATCH[5] + BASH_REMATCH[6]))
    DROPPED=""
    [[ $dropped -eq 0 ]] || DROPPED="$name: the capture dropped packets (${stats#Packets received/dropped on })"
  else
    fail "$name: no drop statistics from dumpcap: $(tr '\r' '\n' <"$WORK/$name.dumpcap.log" | tail -3)"
    CAPTURED=0
    DROPPED=""
  fi
}

# run_cmd NAME LABEL cmd...: runs one host command, logs its output, fails the run on non-zero exit.
run_cmd() {
  local name=$1 label=$2; shift 2
  printf '$ %s\n' "$*" >>"$WORK/$name.host.log"
  if ! "$@" >>"$WORK/$name.host.log" 2>&1; then
    fail "$name: $label failed: $*"
    tail -5 "$WORK/$name.host.log"
  fi
}

hexstr() { local s="" b; for b in "$@"; do s+="\\x$b"; done; printf '%s' "$s"; }
crc32c() {  # crc32c BYTE... (hex) -> 8 hex digits, CRC32C (Castagnoli) as NVMe/TCP digests use it
  local crc=$((0xFFFFFFFF)) b
  for b in "$@"; do
    crc=$((crc ^ 0x$b))
    for _ in 0 1 2 3 4 5 6 7; do crc=$(((crc >> 1) ^ (0x82F63B78 & -(crc & 1)))); done
  done
  printf '%08x' $((crc ^ 0xFFFFFFFF))
}
[[ $(crc32c 31 32 33 34 35 36 37 38 39) == e3069283 ]] || die "crc32c helper is wrong"

# An 8-byte common header with the undefined PDU type 0x0a (hlen 24, plen 24), sent right after
# connecting: the target must answer with a C2HTermReq (FES 1) and close. The dissector never sees
# a whole PDU from it (plen 24 but only 8 bytes), so it is not decoded.
inject_garbage() {
  local name=$1 out=$WORK/$1.garbage.bin
  exec 3<>"/dev/tcp/127.0.0.1/$PORT"
  printf '%b' "$(hexstr 0a 00 18 00 18 00 00 00)" >&3
  timeout 5 cat <&3 >"$out" || true
  exec 3<&- 3>&-
  local got; got=$(od -An -tx1 -v "$out" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
  [[ $got == "03 00 18 00 "* ]] || fail "$name: garbage PDU: expected a C2HTermReq, got '$got'"
}

# ICReq asking for header+data digests, then a 72-byte CapsuleCmd (Identify, CID 0xbeef) with
# HDGSTF set and a header digest that is deliberately wrong. Expect a C2HTermReq with FES 3.
inject_bad_hdgst() {
  local name=$1 out=$WORK/$1.badhdgst.bin
  local icreq=(00 00 80 00 80 00 00 00  00 00 00 03 00 00 00 00)
  for _ in $(seq 112); do icreq+=(00); done
  local cmd=(04 01 48 00 4c 00 00 00  06 00 ef be 00 00 00 00)
  for _ in $(seq 32); do cmd+=(00); done                      # SQE bytes 8-39
  cmd+=(01 00 00 00); for _ in $(seq 20); do cmd+=(00); done   # CDW10 CNS=1, CDW11-15
  local good bad
  good=$(crc32c "${cmd[@]}")
  bad=$(printf '%08x' $((0x$good ^ 0x00000001)))
  # little-endian digest bytes
  cmd+=("${bad:6:2}" "${bad:4:2}" "${bad:2:2}" "${bad:0:2}")
  exec 3<>"/dev/tcp/127.0.0.1/$PORT"
  printf '%b' "$(hexstr "${icreq[@]}")" >&3
  timeout 5 head -c 128 <&3 >"$WORK/$name.icresp.bin" || true
  local icr; icr=$(od -An -tx1 -v "$WORK/$name.icresp.bin" | tr -s ' \n' ' ' | sed 's/^ //')
  [[ $icr == "01 00 80 00 80 00 00 00 00 00 00 03 "* ]] || fail "$name: ICReq with digests: unexpected ICResp '${icr:0:60}'"
  printf '%b' "$(hexstr "${cmd[@]}")" >&3
  timeout 5 cat <&3 >"$out" || true
  exec 3<&- 3>&-
  local got; got=$(od -An -tx1 -v "$out" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
  [[ $got == "03 00 18 00 "*" 03 00 "* && ${got:24:5} == "03 00" ]] \
    || fail "$name: bad header digest: expected a C2HTermReq with FES 3, got '${got:0:80}'"
}

# --- one capture ---------------------------------------------------------------------------------

# capture NAME DIGESTS(0|1) [target options...]
capture() {
  local name=$1 digests=$2; shift 2
  local dg=() trid_dg=""
  if [[ $digests -eq 1 ]]; then dg=(--hdgst --ddgst); trid_dg=" hdgst ddgst"; fi
  : >"$WORK/$name.host.log"
  start_target "$name" "$@"
  start_capture "$name"
  local trid="trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN hostnqn:$HOSTNQN"
  run_cmd "$name" discover "$NVTCP" discover -a 127.0.0.1 -s "$PORT" -q "$HOSTNQN" "${dg[@]}"
  run_cmd "$name" identify "$NVTCP" identify -r "$trid$trid_dg" -q "$HOSTNQN"
  run_cmd "$name" "perf 4K randrw" "$NVTCP" perf -r "$trid ns:1" -q "$PERF_QD" -o 4K -w randrw -M 50 \
    "${PERF_4K[@]}" "${dg[@]}"
  run_cmd "$name" "perf 64K randwrite" "$NVTCP" perf -r "$trid ns:1" -q "$PERF_QD" -o 64K -w randwrite \
    "${PERF_64K[@]}" "${dg[@]}"
  if [[ $digests -eq 1 ]]; then inject_bad_hdgst "$name"; else inject_garbage "$name"; fi
  stop_capture "$name"
  stop_target "$name"
  PACKETS[$name]=$CAPTURED
}

# A capture that dropped packets proves nothing: repeat it once, then fail.
capture_until_lossless() {
  local failures_before=$FAILURES
  capture "$@"
  if [[ -n $DROPPED ]]; then
    log "$DROPPED; repeating this capture once"
    FAILURES=$failures_before
    capture "$@"
    [[ -z $DROPPED ]] || fail "$DROPPED again; lower the I/O count or rate (PERF_4K, PERF_64K)"
  fi
}

# --- checks --------------------------------------------------------------------------------------

TSHARK_OPTS=(-n -d "tcp.port==PORT,nvme-tcp" -o nvme-tcp.check_hdgst:TRUE -o nvme-tcp.check_ddgst:TRUE)

declare -A S   # statistics of the run being checked
declare -A PACKETS
declare -A SUMMARY

# analyse NAME PORT: one tshark pass exporting per-frame fields, reduced by awk to key=value stats.
analyse() {
  local name=$1 port=$2 pcap=$WORK/$1.pcapng
  local opts=("${TSHARK_OPTS[@]}"); opts[2]="tcp.port==$port,nvme-tcp"
  local efields=(); for f in "${FIELDS[@]}"; do efields+=(-e "$f"); done
  tshark -r "$pcap" "${opts[@]}" -T fields -E separator=/t -E occurrence=a -E aggregator=, \
    "${efields[@]}" >"$WORK/$name.fields.tsv" 2>"$WORK/$name.tshark.err" \
    || die "$name: tshark -r failed: $(head -3 "$WORK/$name.tshark.err")"
  # Frames tshark itself finds wrong, with its messages (any of these fails the run).
  tshark -r "$pcap" "${opts[@]}" -T fields -E occurrence=a -E aggregator=' | ' \
    -e frame.number -e tcp.stream -e tcp.srcport -e nvme-tcp.type -e _ws.expert.message \
    -Y '_ws.malformed || _ws.expert.severity >= 8388608 || nvme-tcp.unknown_data || tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment' \
    >"$WORK/$name.bad.tsv" 2>>"$WORK/$name.tshark.err" || die "$name: tshark -r (filter) failed"
  # Warnings, for the record (TCP window-full notes on lo are normal).
  tshark -r "$pcap" "${opts[@]}" -T fields -E occurrence=a -E aggregator=' | ' -e _ws.expert.message \
    -Y '_ws.expert.severity == 6291456' 2>/dev/null | sort | uniq -c | sort -rn >"$WORK/$name.warnings.txt" || true

  S=()
  while IFS='=' read -r k v; do S[$k]=$v; done < <(awk -F'\t' -v port="$port" \
    -v hostnqn="$HOSTNQN" -v nqn="$NQN" -v discnqn="$DISC_NQN" -f /dev/stdin "$WORK/$name.fields.tsv" <<'AWK'
function hex(s,   i, c, v) {           # "0x0c" or "12" -> number (mawk has no strtonum)
  s = tolower(s); v = 0
  if (substr(s, 1, 2) != "0x") return s + 0
  for (i = 3; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)); v = v * 16 + c - 1 }
  return v
}
function add(k, n) { st[k] += n }
function n(field, arr) { return field == "" ? 0 : split(field, arr, ",") }
BEGIN {
  known["0"]; known["1"]; known["2"]; known["3"]; known["4"]; known["5"]; known["6"]; known["7"]; known["9"]
  split("t_icreq t_icresp t_h2cterm t_c2hterm t_cmd t_resp t_h2cdata t_c2hdata t_r2t pdus unknown_type " \
        "hd_flag dd_flag hd_missing dd_missing hd_unexpected dd_unexpected success success_no_last " \
        "incapsule_4k incapsule_write_frames r2t_write_frames admin_cmd_frames io_read_frames io_write_frames " \
        "logpage_0x70 hs_good hs_bad hs_unverified hs_other ds_good ds_bad ds_unverified ds_other " \
        "hs_bad_stream cqe cqe_nonzero r2t_fields r2t_zero data_fields h2c_len_max h2c_offset_nonzero " \
        "connect connect_admin connect_io connect_sub connect_disc connect_badsub connect_badhost " \
        "connect_dfc_off icreq_digest_3 icreq_digest_0 icresp_digest_3 icresp_digest_0 icresp_maxdata " \
        "term_fes1 term_fes3 term_other term_data term_fes3_stream frames_with_pdus", keys, " ")
  for (i in keys) st[keys[i]] = 0
  st["hs_bad_stream"] = -1; st["term_fes3_stream"] = -1
}
{
  # $1 frame  $2 stream  $3 srcport  $4 dstport  $5 severity
  # $6 type  $7 flags  $8 hlen  $9 pdo  $10 plen  $11 hdgst.status  $12 ddgst.status  $13 cmd.qid
  # $14 icreq.digest  $15 icresp.digest  $16 icresp.maxdata  $17 r2t.offset  $18 r2t.length
  # $19 data.offset  $20 data.length  $21 term.fes  $22 term.data  $23 opc  $24 sgl.type
  # $25 sgl.subtype  $26 logpage lid  $27 fctype  $28 connect.qid  $29 cattr.dfc  $30 subnqn
  # $31 hostnqn  $32 cqe.status  $33 flags.pdu.hdgst  $34 flags.pdu.ddgst  $35 flags.pdu.data_last
  # $36 flags.pdu.data_success   (header fields and flag booleans occur once per PDU, in order)
  np = n($6, ty); if (np == 0) next
  n($8, hl); n($9, po); n($10, pl); n($33, fh); n($34, fd); n($35, fla); n($36, fsu)
  add("frames_with_pdus", 1)
  has_cmd = 0; has_h2c = 0
  for (i = 1; i <= np; i++) {
    t = ty[i]; h = hl[i] + 0; p = po[i] + 0; len = pl[i] + 0
    add("pdus", 1)
    if (!(t in known)) { add("unknown_type", 1); continue }
    name = t == 0 ? "t_icreq" : t == 1 ? "t_icresp" : t == 2 ? "t_h2cterm" : t == 3 ? "t_c2hterm" : \
           t == 4 ? "t_cmd" : t == 5 ? "t_resp" : t == 6 ? "t_h2cdata" : t == 7 ? "t_c2hdata" : "t_r2t"
    add(name, 1)
    if (t == 4) has_cmd = 1
    if (t == 6) has_h2c = 1
    hd = fh[i] + 0; dd = fd[i] + 0
    add("hd_flag", hd); add("dd_flag", dd)
    datalen = 0
    if (t == 4 || t == 6 || t == 7) datalen = len - h - 4 * hd - 4 * dd   # no padding: CPDA/HPDA 0
    # Digest flags: IC PDUs never carry digests; we never send TermReq digests either.
    if (t <= 3) { add("hd_unexpected", hd); add("dd_unexpected", dd) }
    else {
      add("hd_missing", !hd)
      if (datalen > 0) add("dd_missing", !dd); else add("dd_unexpected", dd)
    }
    if (t == 7) { add("success", fsu[i] + 0); if (fsu[i] + 0 && !(fla[i] + 0)) add("success_no_last", 1) }
    if (t == 4 && datalen == 4096) add("incapsule_4k", 1)
  }
  # digest status: 0 bad, 1 good, 2 unverified
  k = n($11, a); for (i = 1; i <= k; i++) {
    if (a[i] == 1) add("hs_good", 1); else if (a[i] == 0) { add("hs_bad", 1); st["hs_bad_stream"] = $2 }
    else if (a[i] == 2) add("hs_unverified", 1); else add("hs_other", 1)
  }
  k = n($12, a); for (i = 1; i <= k; i++) {
    if (a[i] == 1) add("ds_good", 1); else if (a[i] == 0) add("ds_bad", 1)
    else if (a[i] == 2) add("ds_unverified", 1); else add("ds_other", 1)
  }
  k = n($14, a); for (i = 1; i <= k; i++) { if (hex(a[i]) == 3) add("icreq_digest_3", 1); if (hex(a[i]) == 0) add("icreq_digest_0", 1) }
  k = n($15, a); for (i = 1; i <= k; i++) { if (hex(a[i]) == 3) add("icresp_digest_3", 1); if (hex(a[i]) == 0) add("icresp_digest_0", 1) }
  k = n($16, a); for (i = 1; i <= k; i++) st["icresp_maxdata"] = hex(a[i])
  k = n($18, a); add("r2t_fields", n($17, b) < k ? n($17, b) : k)
  for (i = 1; i <= k; i++) if (a[i] + 0 == 0) add("r2t_zero", 1)
  k = n($20, a); add("data_fields", n($19, b) < k ? n($19, b) : k)
  if (has_h2c) {
    for (i = 1; i <= k; i++) if (a[i] + 0 > st["h2c_len_max"]) st["h2c_len_max"] = a[i] + 0
    for (i = 1; i <= k; i++) if (b[i] + 0 > 0) add("h2c_offset_nonzero", 1)
  }
  k = n($21, a); for (i = 1; i <= k; i++) {
    v = hex(a[i])
    if (v == 1) add("term_fes1", 1); else if (v == 3) { add("term_fes3", 1); st["term_fes3_stream"] = $2 }
    else add("term_other", 1)
  }
  add("term_data", n($22, a))
  # Commands: frames that carry a CapsuleCmd from the host.
  if (has_cmd && $4 == port && $23 != "") {
    n($13, q); qid = hex(q[1])
    if ($13 != "" && qid == 0) add("admin_cmd_frames", 1)
    if ($13 != "" && qid > 0) {
      k = n($23, a)
      for (i = 1; i <= k; i++) { if (hex(a[i]) == 2) add("io_read_frames", 1); if (hex(a[i]) == 1) add("io_write_frames", 1) }
      n($24, sty); n($25, sst)
      for (i = 1; i <= k; i++) if (hex(a[i]) == 1) {
        if (hex(sty[i]) == 0 && hex(sst[i]) == 1) add("incapsule_write_frames", 1)
        if (hex(sty[i]) == 5 && hex(sst[i]) == 10) add("r2t_write_frames", 1)
      }
    }
  }
  k = n($26, a); for (i = 1; i <= k; i++) if (hex(a[i]) == 112) add("logpage_0x70", 1)
  # Fabrics Connect
  k = n($27, a); for (i = 1; i <= k; i++) if (hex(a[i]) == 1) add("connect", 1)
  k = n($28, a); for (i = 1; i <= k; i++) { if (hex(a[i]) == 0) add("connect_admin", 1); else add("connect_io", 1) }
  k = n($29, a); for (i = 1; i <= k; i++) if (hex(a[i]) != 1) add("connect_dfc_off", 1)
  k = n($30, a); for (i = 1; i <= k; i++) {
    if (a[i] == nqn) add("connect_sub", 1); else if (a[i] == discnqn) add("connect_disc", 1)
    else { add("connect_badsub", 1); printf "badsub_%d=%s\n", st["connect_badsub"], a[i] }
  }
  k = n($31, a); for (i = 1; i <= k; i++) if (a[i] != hostnqn) { add("connect_badhost", 1); printf "badhost_%d=%s\n", st["connect_badhost"], a[i] }
  # CQEs
  k = n($32, a); add("cqe", k); for (i = 1; i <= k; i++) if (hex(a[i]) != 0) add("cqe_nonzero", 1)
}
END { for (k in st) printf "%s=%s\n", k, st[k] }
AWK
)
  S[bad_frames]=$(wc -l <"$WORK/$name.bad.tsv")
  for k in "${!S[@]}"; do printf '%s=%s\n' "$k" "${S[$k]}"; done | sort >"$WORK/$name.stats"
}

# expect NAME DESCRIPTION VALUE OP EXPECTED   (OP: -eq -ne -gt -ge -lt -le)
expect() {
  local name=$1 what=$2 v=$3 op=$4 want=$5
  [[ -n $v ]] || v=0
  if ! [[ $v =~ ^-?[0-9]+$ && $want =~ ^-?[0-9]+$ ]]; then fail "$name: $what: non-numeric '$v' / '$want'"; return; fi
  local ok
  case $op in
    -eq) ok=$((v == want)) ;; -ne) ok=$((v != want)) ;; -gt) ok=$((v > want)) ;;
    -ge) ok=$((v >= want)) ;; -lt) ok=$((v < want)) ;; -le) ok=$((v <= want)) ;;
    *) die "expect: bad operator $op" ;;
  esac
  [[ $ok -eq 1 ]] || fail "$name: $what: got $v, want $op $want"
}

check() {
  local name=$1 digests=$2 port=$3 maxh2c=$4
  local e=(expect "$name")
  analyse "$name" "$port"

  # Nothing tshark objects to: malformed, error expert info, unknown data, lost segments.
  "${e[@]}" "frames with _ws.malformed / error expert info / nvme-tcp.unknown_data / lost TCP segments" "${S[bad_frames]}" -eq 0
  if [[ ${S[bad_frames]} -gt 0 ]]; then
    echo "  frame  stream  srcport  nvme-tcp.type  expert messages"
    head -20 "$WORK/$name.bad.tsv" | sed 's/^/  /'
  fi
  "${e[@]}" "PDUs with a PDU type the dissector does not know" "${S[unknown_type]}" -eq 0
  "${e[@]}" "frames carrying NVMe/TCP PDUs" "${S[frames_with_pdus]}" -gt 0

  # Every PDU type we send.
  "${e[@]}" "ICReq PDUs" "${S[t_icreq]}" -gt 0
  "${e[@]}" "ICResp PDUs" "${S[t_icresp]}" -gt 0
  "${e[@]}" "ICResp count equals ICReq count" "${S[t_icresp]}" -eq "${S[t_icreq]}"
  "${e[@]}" "CapsuleCmd PDUs" "${S[t_cmd]}" -gt 0
  "${e[@]}" "CapsuleResp PDUs" "${S[t_resp]}" -gt 0
  "${e[@]}" "C2HData PDUs" "${S[t_c2hdata]}" -gt 0
  "${e[@]}" "R2T PDUs" "${S[t_r2t]}" -gt 0
  "${e[@]}" "H2CData PDUs" "${S[t_h2cdata]}" -gt 0
  "${e[@]}" "C2HTermReq PDUs" "${S[t_c2hterm]}" -eq 1
  "${e[@]}" "H2CTermReq PDUs (our host has no reason to send one)" "${S[t_h2cterm]}" -eq 0
  "${e[@]}" "admin CapsuleCmd frames (qid 0, NVMe opcode)" "${S[admin_cmd_frames]}" -gt 0
  "${e[@]}" "discovery Get Log Page (LID 0x70) commands" "${S[logpage_0x70]}" -gt 0
  "${e[@]}" "I/O Read commands (qid > 0)" "${S[io_read_frames]}" -gt 0
  "${e[@]}" "I/O Write commands (qid > 0)" "${S[io_write_frames]}" -gt 0
  "${e[@]}" "in-capsule writes (SGL Data Block/Offset)" "${S[incapsule_write_frames]}" -gt 0
  "${e[@]}" "CapsuleCmd PDUs carrying 4096 bytes in-capsule" "${S[incapsule_4k]}" -gt 0
  "${e[@]}" "R2T writes (SGL Transport Data Block)" "${S[r2t_write_frames]}" -gt 0

  # C2HData SUCCESS (our host disables SQ flow control), and SUCCESS only with LAST_PDU.
  "${e[@]}" "C2HData PDUs with data_success" "${S[success]}" -gt 0
  "${e[@]}" "C2HData PDUs with SUCCESS but not LAST_PDU" "${S[success_no_last]}" -eq 0

  # Fabrics Connect.
  "${e[@]}" "Connect commands" "${S[connect]}" -gt 0
  "${e[@]}" "Connect commands with decoded subnqn" "$((S[connect_sub] + S[connect_disc] + S[connect_badsub]))" -eq "${S[connect]}"
  "${e[@]}" "Connect to $NQN" "${S[connect_sub]}" -gt 0
  "${e[@]}" "Connect to $DISC_NQN" "${S[connect_disc]}" -gt 0
  "${e[@]}" "Connect with another subnqn" "${S[connect_badsub]}" -eq 0
  "${e[@]}" "Connect with a hostnqn other than $HOSTNQN" "${S[connect_badhost]}" -eq 0
  "${e[@]}" "admin queue Connects (qid 0)" "${S[connect_admin]}" -gt 0
  "${e[@]}" "I/O queue Connects (qid > 0)" "${S[connect_io]}" -gt 0
  "${e[@]}" "Connects without CATTR 'disable SQ flow control'" "${S[connect_dfc_off]}" -eq 0
  local k; for k in "${!S[@]}"; do [[ $k == bad* && $k != bad_frames ]] && log "  $name: $k=${S[$k]}"; done

  # CQEs: every CapsuleResp decoded against its command, status 0.
  "${e[@]}" "CQEs decoded (nvme.cqe.status) vs CapsuleResp PDUs" "${S[cqe]}" -eq "${S[t_resp]}"
  "${e[@]}" "CQEs with non-zero status" "${S[cqe_nonzero]}" -eq 0

  # R2T and data PDU fields.
  "${e[@]}" "R2T PDUs with offset and length" "${S[r2t_fields]}" -eq "${S[t_r2t]}"
  "${e[@]}" "R2T PDUs with length 0" "${S[r2t_zero]}" -eq 0
  "${e[@]}" "H2CData/C2HData PDUs with offset and length" "${S[data_fields]}" -eq "$((S[t_h2cdata] + S[t_c2hdata]))"
  "${e[@]}" "largest H2CData length vs MAXH2CDATA" "${S[h2c_len_max]}" -le "$maxh2c"
  "${e[@]}" "ICResp MAXH2CDATA" "${S[icresp_maxdata]}" -eq "$maxh2c"
  if [[ $maxh2c -lt 65536 ]]; then
    "${e[@]}" "H2CData PDUs at a non-zero offset (64 KiB write > MAXH2CDATA)" "${S[h2c_offset_nonzero]}" -gt 0
  fi

  # C2HTermReq.
  "${e[@]}" "C2HTermReq with its terminated PDU header" "${S[term_data]}" -eq "${S[t_c2hterm]}"
  "${e[@]}" "C2HTermReq with an unexpected FES" "${S[term_other]}" -eq 0

  if [[ $digests -eq 0 ]]; then
    "${e[@]}" "C2HTermReq FES 1 (invalid PDU header field) for the garbage PDU" "${S[term_fes1]}" -eq 1
    "${e[@]}" "PDUs with HDGSTF" "${S[hd_flag]}" -eq 0
    "${e[@]}" "PDUs with DDGSTF" "${S[dd_flag]}" -eq 0
    "${e[@]}" "ICResp with digests enabled" "${S[icresp_digest_3]}" -eq 0
  else
    "${e[@]}" "C2HTermReq FES 3 (header digest error) for the injected PDU" "${S[term_fes3]}" -eq 1
    "${e[@]}" "ICReq asking for header+data digests vs ICReq PDUs" "${S[icreq_digest_3]}" -eq "${S[t_icreq]}"
    "${e[@]}" "ICResp granting header+data digests vs ICResp PDUs" "${S[icresp_digest_3]}" -eq "${S[t_icresp]}"
    "${e[@]}" "PDUs after IC without HDGSTF" "${S[hd_missing]}" -eq 0
    "${e[@]}" "PDUs with data but without DDGSTF" "${S[dd_missing]}" -eq 0
    "${e[@]}" "HDGSTF/DDGSTF where no digest belongs" "$((S[hd_unexpected] + S[dd_unexpected]))" -eq 0
    "${e[@]}" "header digests checked by tshark vs PDUs with HDGSTF" \
      "$((S[hs_good] + S[hs_bad] + S[hs_unverified] + S[hs_other]))" -eq "${S[hd_flag]}"
    "${e[@]}" "data digests checked by tshark vs PDUs with DDGSTF" \
      "$((S[ds_good] + S[ds_bad] + S[ds_unverified] + S[ds_other]))" -eq "${S[dd_flag]}"
    "${e[@]}" "header digests verified good" "${S[hs_good]}" -gt 0
    "${e[@]}" "data digests verified good" "${S[ds_good]}" -gt 0
    "${e[@]}" "header digests left unverified" "$((S[hs_unverified] + S[hs_other]))" -eq 0
    "${e[@]}" "data digests left unverified" "$((S[ds_unverified] + S[ds_other]))" -eq 0
    "${e[@]}" "data digests tshark finds wrong" "${S[ds_bad]}" -eq 0
    # Exactly one bad header digest: the injected one (negative control), in the TermReq's stream.
    "${e[@]}" "header digests tshark finds wrong (only the injected one)" "${S[hs_bad]}" -eq 1
    "${e[@]}" "TCP stream of the bad header digest vs that of the FES 3 C2HTermReq" \
      "${S[hs_bad_stream]}" -eq "${S[term_fes3_stream]}"
  fi

  SUMMARY[$name]="${S[t_icreq]} ${S[t_icresp]} ${S[t_cmd]} ${S[t_resp]} ${S[t_c2hdata]} ${S[success]} ${S[t_r2t]} ${S[t_h2cdata]} ${S[incapsule_4k]} ${S[t_c2hterm]} ${S[t_h2cterm]} ${S[pdus]} ${PACKETS[$name]}"
  if [[ -s $WORK/$name.warnings.txt ]]; then
    log "  $name: tshark warnings (not failures):"; sed 's/^/    /' "$WORK/$name.warnings.txt"
  fi
}

# --- main ----------------------------------------------------------------------------------------

log "== plain: digests off"
capture_until_lossless plain 0
PLAIN_PORT=$PORT
log "== digest: --hdgst --ddgst, MAXH2CDATA 16 KiB"
capture_until_lossless digest 1 --max-h2c-data 16384
DIGEST_PORT=$PORT

log "== checking plain capture (port $PLAIN_PORT)"
check plain 0 "$PLAIN_PORT" 131072
log "== checking digest capture (port $DIGEST_PORT)"
check digest 1 "$DIGEST_PORT" 16384

echo
printf '%-7s %6s %6s %8s %8s %8s %8s %6s %8s %8s %7s %7s %7s %8s\n' run ICReq ICResp CapCmd CapResp \
  C2HData +SUCCESS R2T H2CData InCap4K C2HTerm H2CTerm PDUs packets
for r in plain digest; do
  # shellcheck disable=SC2086
  printf '%-7s %6s %6s %8s %8s %8s %8s %6s %8s %8s %7s %7s %7s %8s\n' "$r" ${SUMMARY[$r]:-}
done
echo
if [[ $FAILURES -gt 0 ]]; then
  echo "interop.tshark: $FAILURES check(s) FAILED in $((SECONDS - START)) s ($TSHARK_VERSION)"
  exit 1
fi
echo "interop.tshark: PASS in $((SECONDS - START)) s ($TSHARK_VERSION)"
