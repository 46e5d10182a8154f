#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Seed corpora for the libFuzzer targets, made of real nvtcp sessions captured on loopback.
#
#   sudo tests/fuzz/capture_corpus.sh [path/to/nvtcp]      (default: build/nvtcp)
#
# Regenerate after a protocol change: build nvtcp (`make build`), run this from the repository
# root as root (packet capture on lo), check `git status tests/fuzz/corpus`, and commit the
# cap_* files. Hand-made seeds in the same directories are left alone; only cap_* files are
# replaced.
#
# What it does: starts `nvtcp target` on a free loopback port with a NULL and a RAM namespace,
# captures with dumpcap while `nvtcp identify`, `nvtcp discover` and `nvtcp perf` (4 KiB reads,
# 4 KiB in-capsule writes, 64 KiB R2T writes) run, once with digests off and once with header
# and data digests and MAXH2CDATA 16 KiB (several H2CData PDUs per R2T). Then each TCP stream's
# two directions are pulled out of the capture (`tshark -z follow,tcp,raw,N`), truncated to
# MAX_BYTES (default 32 KiB), and written in each fuzzer's input format:
#
#   target_connection/cap_*   host->target bytes as they are (the fuzzer's input is the stream)
#   pdu_receiver/cap_*        [ctl][step] + stream: ctl bit 0 = which side receives (0 target:
#                             host->target bytes, 1 host: target->host bytes), digests start off
#                             (the ICReq/ICResp in the stream turns them on), bit 3 on every
#                             other file (in-place receive path); step 255 or 61
#   host_connection/cap_*     8-byte header + target->host bytes: handshake mode 2 (the stream's
#                             own ICResp and Connect response come first, the rest once the
#                             fuzzer's host has submitted), the digests and queue id the real
#                             host used, and the fuzzer's commands set to the first (up to 4)
#                             commands the real host sent after Connect (opcode and length)
#
# A capture that dropped packets is repeated (a stream with a hole is not a real session).
# Needs tshark/dumpcap (installed with apt-get when missing) and python3.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NVTCP=$(readlink -f "${1:-$ROOT/build/nvtcp}")
[[ -x $NVTCP ]] || { echo "capture_corpus: $NVTCP is not an executable (build it first)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "capture_corpus: needs root (packet capture on lo)" >&2; exit 1; }
MAX_BYTES=${MAX_BYTES:-32768}
CORPUS=$ROOT/tests/fuzz/corpus
NQN=nqn.2026-11.io.nvtcp:corpus
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5e1f0c2a-9b7d-4e31-8a6c-2d4f6b8e0a13

if ! command -v tshark >/dev/null || ! command -v dumpcap >/dev/null; then
  echo "capture_corpus: tshark/dumpcap are missing: \`make deps\` installs them" >&2
  exit 1
fi

WORK=$(mktemp -d /tmp/nvtcp-corpus.XXXXXX)
TARGET_PID="" CAP_PID=""
cleanup() {
  set +e
  [[ -n $CAP_PID ]] && kill -INT "$CAP_PID" 2>/dev/null && wait "$CAP_PID" 2>/dev/null
  [[ -n $TARGET_PID ]] && kill -INT "$TARGET_PID" 2>/dev/null && wait "$TARGET_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

port_free() { [[ -z $(ss -Htan "( sport = :$1 or dport = :$1 )") ]]; }
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 20000))
    [[ $p != "${1:-}" ]] && port_free "$p" && { echo "$p"; return; }
  done
  echo "capture_corpus: no free port" >&2; exit 1
}

# session NAME DIGESTS(0|1) [target options...]: one target, one capture, every host command.
session() {
  local name=$1 digests=$2; shift 2
  local dg=() tdg=""
  [[ $digests -eq 1 ]] && { dg=(--hdgst --ddgst); tdg=" hdgst ddgst"; }
  local port; port=$(free_port)
  rm -f "$WORK/ready"
  "$NVTCP" target --listen "127.0.0.1:$port" --discovery-port 0 --null 1G --ram 16M --nqn "$NQN" \
    --ready-file "$WORK/ready" --log-level warn "$@" >"$WORK/$name.target.log" 2>&1 &
  TARGET_PID=$!
  for _ in $(seq 100); do [[ -s $WORK/ready ]] && break; sleep 0.1; done
  [[ -s $WORK/ready ]] || { cat "$WORK/$name.target.log"; echo "capture_corpus: target did not start" >&2; exit 1; }

  # Capture the target's port and a closed sentinel port; a SYN to the sentinel showing up in
  # the file proves the capture is running before the real traffic starts.
  local sent; sent=$(free_port "$port") pcap=$WORK/$name.pcapng
  dumpcap -i lo -B 64 -f "tcp port $port or tcp port $sent" -w "$pcap" -q 2>"$WORK/$name.dumpcap.log" &
  CAP_PID=$!
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$sent") 2>/dev/null || true
    [[ -s $pcap && -n $(tshark -r "$pcap" -c 1 -Y "tcp.port == $sent" 2>/dev/null) ]] && break
    sleep 0.1
  done

  local trid="trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$HOSTNQN$tdg"
  local perf=("$NVTCP" perf -q 2 -t 0.1 "${dg[@]}")
  {
    "$NVTCP" identify -r "$trid" -q "$HOSTNQN"
    "$NVTCP" discover -a 127.0.0.1 -s "$port" -q "$HOSTNQN" "${dg[@]}"
    "${perf[@]}" -r "$trid ns:1" -o 4K -w randread     # NULL namespace: C2HData with SUCCESS
    "${perf[@]}" -r "$trid ns:2" -o 4K -w randwrite    # RAM namespace: in-capsule writes
    "${perf[@]}" -r "$trid ns:2" -o 64K -w randwrite   # R2T + H2CData
    "${perf[@]}" -r "$trid ns:2" -o 16K -w randread
  } >"$WORK/$name.host.log" 2>&1 || { cat "$WORK/$name.host.log"; echo "capture_corpus: a host command failed" >&2; exit 1; }

  sleep 0.3  # the last FIN/ACKs
  kill -INT "$CAP_PID"; wait "$CAP_PID" || true; CAP_PID=""
  kill -INT "$TARGET_PID"; wait "$TARGET_PID" || true; TARGET_PID=""
  local stats; stats=$(grep -a 'Packets received/dropped' "$WORK/$name.dumpcap.log" || true)
  if [[ ! $stats =~ /0\ \(pcap:0/dumpcap:0/flushed:0/ps_ifdrop:0\) ]]; then
    echo "capture_corpus: $name: lossy capture ($stats)" >&2
    return 1
  fi
  # One file per stream: Node 0 (the host, which sends first) unindented, the target indented.
  local streams; streams=$(tshark -r "$pcap" -T fields -e tcp.stream \
    -Y "tcp.port == $port && tcp.flags.syn == 1 && tcp.flags.ack == 0" 2>/dev/null | sort -un)
  for s in $streams; do
    tshark -r "$pcap" -q -z "follow,tcp,raw,$s" >"$WORK/$name.stream$s.txt" 2>/dev/null
  done
  echo "$name: $(echo "$streams" | wc -w) TCP streams, ${stats#*: }"
}

for attempt in 1 2 3; do session plain 0 && break; [[ $attempt -lt 3 ]] || exit 1; done
for attempt in 1 2 3; do session digest 1 --max-h2c-data 16384 && break; [[ $attempt -lt 3 ]] || exit 1; done

mkdir -p "$CORPUS/target_connection" "$CORPUS/pdu_receiver" "$CORPUS/host_connection"
rm -f "$CORPUS"/{target_connection,pdu_receiver,host_connection}/cap_*
MAX_BYTES=$MAX_BYTES python3 - "$WORK" "$CORPUS" <<'PY'
import glob, os, re, struct, sys

work, corpus = sys.argv[1], sys.argv[2]
limit = int(os.environ["MAX_BYTES"])

def follow(path):
    """tshark -z follow,tcp,raw: node 0 (client) lines unindented, node 1 lines tab-indented."""
    host, target = bytearray(), bytearray()
    for line in open(path):
        if line.startswith(("=====", "Follow:", "Filter:", "Node ")) or not line.strip():
            continue
        (target if line.startswith("\t") else host).extend(bytes.fromhex(line.strip()))
    return bytes(host), bytes(target)

def pdus(b):
    off = 0
    while off + 8 <= len(b):
        plen = struct.unpack_from("<I", b, off + 4)[0]
        if plen < 8 or off + plen > len(b):
            return
        yield b[off:off + plen]
        off += plen

def describe(host):
    """Digests, queue id and the first commands after Connect, as the real host sent them."""
    it = list(pdus(host))
    if len(it) < 2 or it[0][0] != 0x00 or it[1][0] != 0x04:
        return None
    digest = it[0][11]
    sqe = it[1][8:72]
    qid = struct.unpack_from("<H", sqe, 42)[0]
    cmds = {}
    for p in it[2:]:
        if p[0] != 0x04:
            continue
        s = p[8:72]
        opc, cid, length = s[0], struct.unpack_from("<H", s, 2)[0], struct.unpack_from("<I", s, 32)[0]
        if cid < 4 and cid not in cmds:
            cmds[cid] = (opc, length)
        if len(cmds) == 4:
            break
    return digest, qid, [cmds[c] for c in sorted(cmds)][:4]

def kind(opc, length):
    if length == 0:
        return 0x10                      # no data (Flush in the fuzzer)
    code = max(0, min(7, (length // 512).bit_length() - 1))
    return (1 if opc == 0x01 else 0) | (code << 1)

def write(sub, name, data):
    with open(os.path.join(corpus, sub, name), "wb") as f:
        f.write(data)

n = 0
seen = set()
for path in sorted(glob.glob(os.path.join(work, "*.stream*.txt"))):
    session, stream = re.match(r".*/(\w+)\.stream(\d+)\.txt$", path).groups()
    host, target = follow(path)
    d = describe(host)
    if d is None or not target or target[0] != 0x01:
        continue                          # not an NVMe/TCP session (e.g. the sentinel)
    digest, qid, cmds = d
    # Every perf run opens the same admin session: keep one per capture.
    if qid == 0:
        key = (session, len(target))
        if key in seen:
            continue
        seen.add(key)
    what = "admin" if qid == 0 else "io"
    if cmds and qid:
        opc, length = cmds[0]
        what += ("_w" if opc == 1 else "_r") + str(length // 1024) + "k"
    name = f"cap_{session}_s{int(stream):02d}_{what}"
    h, t = host[:limit], target[:limit]
    write("target_connection", name, h)
    inplace = 0x08 if n % 2 else 0
    write("pdu_receiver", name + "_h2c", bytes([0x00 | inplace, 255 if n % 2 else 61]) + h)
    write("pdu_receiver", name + "_c2h", bytes([0x01 | inplace, 61 if n % 2 else 255]) + t)
    ctl = 0x02 | (0x04 if digest & 1 else 0) | (0x08 if digest & 2 else 0) | 0x10 | \
          (0x20 if qid == 0 else 0) | 0x40
    counts = (max(1, len(cmds)) - 1) | (63 << 2)
    kinds = [kind(*c) for c in cmds] + [0] * (4 - len(cmds))
    write("host_connection", name, bytes([ctl, counts, 0x07, 0]) + bytes(kinds) + t)
    n += 1
print(f"wrote {n} sessions ({n} target_connection, {2 * n} pdu_receiver, {n} host_connection files)")
PY
du -sh "$CORPUS"/{target_connection,pdu_receiver,host_connection}
