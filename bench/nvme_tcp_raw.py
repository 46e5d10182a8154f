# SPDX-License-Identifier: Apache-2.0
"""A host written against the wire format alone (NVMe/TCP 1.0, NVMe 2.0, fabrics), for benchmarks
that need to send what no tool sends on purpose (a stranger's authentication, a flood of Copies):
PDUs and commands built byte by byte, one blocking socket, one queue."""
import os
import socket
import struct


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionError("closed")
        b += c
    return b


def recv_pdu(s):
    ch = recv_exact(s, 8)
    plen = struct.unpack_from("<I", ch, 4)[0]
    return ch + recv_exact(s, plen - 8)


def capsule(sqe, data=b""):
    hlen = 8 + 64
    pdo = hlen if data else 0
    return struct.pack("<BBBBI", 0x04, 0, hlen, pdo, hlen + len(data)) + sqe + data


def sqe(opc, cid, length=0, in_capsule=False, nsid=0, fctype=None):
    """A 64-byte command with an SGL: Data Block with Offset (in the capsule) or Transport Data
    Block (the controller moves the data). fctype: a fabrics command's type, at byte 4."""
    b = bytearray(64)
    struct.pack_into("<BBHI", b, 0, opc, 0x40, cid, nsid)  # PSDT 01b: SGLs, as fabrics requires
    if fctype is not None:
        b[4] = fctype
    struct.pack_into("<QI3xB", b, 24, 0, length, 0x01 if in_capsule else 0x5A)
    return b


def response(s):
    """The next CapsuleResp: (cid, dw0, status code without the phase bit), with any C2HData
    before it (returned as data)."""
    data = b""
    while True:
        p = recv_pdu(s)
        if p[0] == 0x07:  # C2HData
            data += p[p[3]:]
            if p[1] & 0x08:  # SUCCESS: no CapsuleResp follows
                return struct.unpack_from("<H", p, 8)[0], 0, 0, data
            continue
        if p[0] == 0x05:
            dw0, _, _, _, cid, status = struct.unpack_from("<IIHHHH", p, 8)
            return cid, dw0, status >> 1, data
        raise ConnectionError("PDU type %d" % p[0])


def open_queue(port, source="127.0.0.1"):
    s = socket.socket()
    s.settimeout(30)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(struct.pack("<BBBBIHBBI", 0x00, 0, 128, 0, 128, 0, 0, 0, 0) + bytes(128 - 16))  # ICReq
    if recv_pdu(s)[0] != 0x01:
        raise ConnectionError("no ICResp")
    return s


def connect(s, subnqn, hostnqn, hostid, qid, cntlid=0xFFFF, sqsize=31):
    """Fabrics Connect; returns the response's DW0 (CNTLID, ATR) and status."""
    data = bytearray(1024)
    data[0:16] = hostid
    struct.pack_into("<H", data, 16, cntlid)
    data[256:256 + len(subnqn)] = subnqn.encode()
    data[512:512 + len(hostnqn)] = hostnqn.encode()
    c = sqe(0x7F, 1, 1024, True, fctype=0x01)
    struct.pack_into("<HHHBxI", c, 40, 0, qid, sqsize, 0, 0)  # RECFMT, QID, SQSIZE, CATTR, KATO 0
    s.sendall(capsule(bytes(c), bytes(data)))
    _, dw0, status, _ = response(s)
    return dw0, status


def property_set(s, cid, offset, value):
    c = sqe(0x7F, cid, fctype=0x00)
    struct.pack_into("<BxxxIQ", c, 40, 0, offset, value)  # ATTRIB 4 bytes, OFST, VALUE
    s.sendall(capsule(bytes(c)))
    return response(s)[2]


def set_queues(s, cid, n):
    c = sqe(0x09, cid)
    struct.pack_into("<II", c, 40, 0x07, (n - 1) | (n - 1) << 16)  # Number of Queues
    s.sendall(capsule(bytes(c)))
    return response(s)[2]


def controller(port, subnqn, hostnqn, io_queues=1, source="127.0.0.1"):
    """An enabled controller with io_queues I/O queues granted: (admin socket, CNTLID)."""
    hostid = os.urandom(16)
    a = open_queue(port, source)
    dw0, status = connect(a, subnqn, hostnqn, hostid, 0)
    if status:
        raise ConnectionError("admin Connect: status 0x%x" % status)
    if property_set(a, 2, 0x14, 0x00460001) or set_queues(a, 3, io_queues):  # CC.EN, IOSQES 6, IOCQES 4
        raise ConnectionError("enabling the controller failed")
    return a, dw0 & 0xFFFF, hostid


def start_target(nvtcp, cfg, work, tag, cpus="0"):
    """`nvtcp target` with configuration cfg (a dict) on cpus, serving: (process, port, log file)."""
    import json
    import subprocess
    import sys
    import time
    conf = os.path.join(work, tag + ".json")
    with open(conf, "w") as f:
        json.dump(cfg, f)
    ready = os.path.join(work, tag + ".ready")
    log_path = os.path.join(work, tag + ".log")
    log = open(log_path, "w")
    p = subprocess.Popen([nvtcp, "target", "--config", conf, "--cpus", cpus, "--ready-file", ready], stdout=log,
                         stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(ready) and os.path.getsize(ready):
            port = int(open(ready).read().strip())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return p, port, log
            except OSError:
                pass
        time.sleep(0.05)
    sys.exit("target %s did not start: %s" % (tag, open(log_path).read()))
