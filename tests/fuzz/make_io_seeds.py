#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Hand-made seeds for the target_connection fuzzer: I/O queues of its standing controller.

    python3 tests/fuzz/make_io_seeds.py      (from the repository root; rewrites io_* seeds)

Each seed is the host->target byte stream of one I/O queue: ICReq, Connect (qid 1, controller 1,
the fuzzer's host NQN and host ID), then I/O commands in their good and bad forms: Compare,
fused Compare and Write (matching, mismatching, broken pairs), Copy (good, past the end, bad
format, too many ranges), reservations (register, acquire, report, preempt, release, wrong
keys), Verify and an Abort-free write/read. The layouts are the NVMe/TCP and NVMe ones
(little-endian); see src/wire/pdu.hpp, src/wire/fabrics.hpp and include/nvtcp/sqe.hpp.
"""
import os
import struct

NQN = b"nqn.2026-11.io.nvtcp:fuzz"
HOSTNQN = b"nqn.2026-11.io.nvtcp:fuzz-host"
HOSTID = bytes(range(16))
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "target_connection")

PSDT_SGL = 0x40
SGL_INCAPSULE = 0x01   # data block, offset: in-capsule data
SGL_TRANSPORT = 0x5A   # transport data block: R2T / C2HData


def icreq():
    # common header: type 0, flags, hlen 128, pdo 0, plen 128; PFV 0, HPDA 0, digests off, MAXR2T 0
    return struct.pack("<BBBBI", 0x00, 0, 128, 0, 128) + struct.pack("<HBBI", 0, 0, 0, 0) + bytes(112)


def sqe(opc, cid, nsid=0, cdw10=0, cdw11=0, cdw12=0, cdw13=0, cdw14=0, cdw15=0, flags=PSDT_SGL,
        sgl_len=0, sgl_type=SGL_TRANSPORT):
    head = struct.pack("<BBHI", opc, flags, cid, nsid) + bytes(16)  # CDW2-3, MPTR
    sgl = struct.pack("<QI", 0, sgl_len) + bytes(3) + bytes([sgl_type])
    return head + sgl + struct.pack("<6I", cdw10, cdw11, cdw12, cdw13, cdw14, cdw15)


def capsule(s, data=b""):
    hlen = 72
    pdo = hlen if data else 0
    return struct.pack("<BBBBI", 0x04, 0, hlen, pdo, hlen + len(data)) + s + data


def connect(qid, cntlid):
    s = bytearray(64)
    struct.pack_into("<BBH", s, 0, 0x7F, PSDT_SGL, 1)
    s[4] = 0x01  # FCTYPE Connect
    struct.pack_into("<QI", s, 24, 0, 1024)
    s[39] = SGL_INCAPSULE
    struct.pack_into("<HHHBBI", s, 40, 0, qid, 31, 0, 0, 0)
    data = bytearray(1024)
    data[0:16] = HOSTID
    struct.pack_into("<H", data, 16, cntlid)
    data[256:256 + len(NQN)] = NQN
    data[512:512 + len(HOSTNQN)] = HOSTNQN
    return capsule(bytes(s), bytes(data))


def rw(opc, cid, nsid, slba, nlb, data=b"", fuse=0):
    length = len(data) if data else nlb * 512
    return capsule(sqe(opc, cid, nsid, slba & 0xFFFFFFFF, slba >> 32, nlb - 1, flags=PSDT_SGL | fuse,
                       sgl_len=length, sgl_type=SGL_INCAPSULE if data else SGL_TRANSPORT), data)


def copy_cmd(cid, sdlba, ranges, fmt=0, nr=None):
    data = b"".join(bytes(8) + struct.pack("<QH", slba, nlb - 1) + bytes(14) for slba, nlb in ranges)
    n = len(ranges) if nr is None else nr
    return capsule(sqe(0x19, cid, 1, sdlba, 0, (n - 1) | fmt << 8, sgl_len=len(data), sgl_type=SGL_INCAPSULE), data)


def resv(opc, cid, cdw10, data, nsid=1):
    return capsule(sqe(opc, cid, nsid, cdw10, sgl_len=len(data), sgl_type=SGL_INCAPSULE), data)


def report(cid, numd, eds=1):
    return capsule(sqe(0x0E, cid, 1, numd, eds, sgl_len=(numd + 1) * 4))


def session(*cmds):
    return icreq() + connect(1, 1) + b"".join(cmds)


A = b"\xa5" * 512
B = b"\x5a" * 512
SEEDS = {
    "io_compare_14": session(
        rw(0x01, 2, 1, 10, 1, A), rw(0x05, 3, 1, 10, 1, A), rw(0x05, 4, 1, 10, 1, B),
        rw(0x05, 5, 1, 2047, 2, A + A), rw(0x05, 6, 1, 10, 8), rw(0x0C, 7, 1, 0, 8), rw(0x0C, 8, 1, 4000, 200)),
    "io_fused_14": session(
        rw(0x01, 2, 1, 50, 1, A),
        rw(0x05, 3, 1, 50, 1, A, fuse=1), rw(0x01, 4, 1, 50, 1, B, fuse=2),   # matches: writes B
        rw(0x05, 5, 1, 50, 1, A, fuse=1), rw(0x01, 6, 1, 50, 1, A, fuse=2),   # compare fails
        rw(0x05, 7, 1, 50, 1, B, fuse=1), rw(0x02, 8, 1, 50, 1),             # missing second
        rw(0x01, 9, 1, 50, 1, B, fuse=2),                                    # second alone
        rw(0x05, 10, 1, 50, 1, B, fuse=1), rw(0x01, 11, 1, 51, 1, B, fuse=2),  # other blocks
        rw(0x01, 12, 1, 50, 1, B, fuse=1), rw(0x05, 13, 1, 50, 1, B, fuse=3)),
    "io_copy_14": session(
        rw(0x01, 2, 1, 0, 1, A), rw(0x01, 3, 1, 1, 1, B),
        copy_cmd(4, 100, [(0, 1), (1, 1)]), copy_cmd(5, 2047, [(0, 2)]), copy_cmd(6, 100, [(0, 1)], fmt=1),
        copy_cmd(7, 100, [(2040, 16)]), copy_cmd(8, 100, [(0, 1)], nr=2), copy_cmd(9, 101, [(100, 2)]),
        rw(0x02, 10, 1, 100, 2)),
    "io_resv_14": session(
        resv(0x0D, 2, 0, struct.pack("<QQ", 0, 0xA1)),                 # register
        resv(0x0D, 3, 0, struct.pack("<QQ", 0, 0xB2)),                 # another key: conflict
        resv(0x11, 4, 1 << 8, struct.pack("<QQ", 0xA1, 0)),            # acquire write exclusive
        resv(0x11, 5, 2 << 8, struct.pack("<QQ", 0xA1, 0)),            # another type: conflict
        report(6, 1023), report(7, 15), report(8, 1023, eds=0),
        rw(0x01, 9, 1, 5, 1, A),
        resv(0x11, 10, 1 << 8 | 1, struct.pack("<QQ", 0xA1, 0xA1)),    # preempt itself
        resv(0x15, 11, 2 << 8, struct.pack("<Q", 0xA1)),               # wrong type
        resv(0x15, 12, 1 << 8, struct.pack("<Q", 0xA1)),               # release
        resv(0x0D, 13, 2 | 3 << 30, struct.pack("<QQ", 0xA1, 0xC3)),   # replace, PTPL on a RAM ns
        resv(0x0D, 14, 2, struct.pack("<QQ", 0xA1, 0xC3)),             # replace
        resv(0x11, 15, 7 << 8, struct.pack("<QQ", 0xC3, 0)),           # type 7
        resv(0x15, 16, 1, struct.pack("<Q", 0xC3)),                    # clear
        resv(0x0D, 17, 1, struct.pack("<QQ", 0xC3, 0)),                # unregister: not registered
        resv(0x0D, 18, 0, struct.pack("<Q", 0))),                      # 8 bytes of register data
    # A reservation flood (issue 24 finding 8): the same host registering, replacing its key,
    # acquiring and releasing in a loop with full-size Reports in between, then "all
    # registrants" reservations and Clear, so the fuzzer starts from long command runs.
    "io_resv_flood_14": session(*[
        c for i in range(24) for c in (
            resv(0x0D, 2 + 6 * i, 0, struct.pack("<QQ", 0, 0x100 + i)),                 # register (new key: conflict after the first)
            resv(0x0D, 3 + 6 * i, 2 | 1 << 3, struct.pack("<QQ", 0, 0x100 + i + 1)),     # replace, IEKEY
            resv(0x11, 4 + 6 * i, (5 + i % 2) << 8, struct.pack("<QQ", 0x100 + i + 1, 0)),  # acquire all registrants
            report(5 + 6 * i, 1023 if i % 3 else 15),
            resv(0x11, 6 + 6 * i, (5 + i % 2) << 8 | 1, struct.pack("<QQ", 0x100 + i + 1, 0)),  # preempt all
            resv(0x15, 7 + 6 * i, (5 + i % 2) << 8 | (i % 2), struct.pack("<Q", 0x100 + i + 1)))  # release / clear
    ], rw(0x01, 200, 1, 5, 1, A), rw(0x02, 201, 1, 5, 1)),
}

for name, data in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes")
