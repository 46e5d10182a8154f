#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Known-answer values for NVMe/TCP TLS keys, to check an implementation against (facts and
# sources: docs/security/interop-facts.md, section 5). Scratch vectors, not the project's
# implementation.
#   kunit:       the kernel KUnit test's inputs: PSK, v1 identity digest and derived TLS PSK,
#                SHA-256 and SHA-384 (these reproduce the published values).
#   identities:  retained PSK, v0/v1 identity and derived TLS PSK for the NQNs of section 5,
#                in the RFC 8446 label encoding and in the legacy libnvme ("compat") one.
#   dhchap:      the section 5.5 secret transformed, ffdhe2048 values for a fixed private
#                exponent, an augmented challenge and both responses (LOCAL: computed from the
#                formulas of section 2, not published vectors).
import base64
import hashlib
import hmac
import struct
import sys


def hkdf_extract(h, salt, ikm):
    return hmac.new(salt, ikm, h).digest()


def hkdf_expand(h, prk, info, length):
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = hmac.new(prk, t + info + bytes([i]), h).digest()
        out += t
        i += 1
    return out[:length]


def hkdf(h, ikm, info, length):
    return hkdf_expand(h, hkdf_extract(h, b"\0" * h().digest_size, ikm), info, length)


def rfc_label(length, label, ctx):
    """HkdfLabel as RFC 8446 encodes it."""
    full = b"tls13 " + label
    return struct.pack(">H", length) + bytes([len(full)]) + full + bytes([len(ctx)]) + ctx


def compat_label(length, label, ctx):
    """The legacy libnvme encoding: host-endian length, no length bytes for label or context."""
    return struct.pack("<H", length) + b"tls13 " + label + ctx


def identity_digest(h, retained, host, sub):
    return base64.b64encode(hmac.new(retained, host + b" " + sub + b" NVMe-over-Fabrics", h).digest())


def kunit():
    for hid, h, hl in [(1, hashlib.sha256, 32), (2, hashlib.sha384, 48)]:
        skey = bytes(ord("A") + i for i in range(64))[:hl]
        c1 = bytes(range(64))[:hl]
        c2 = bytes(0xFF - i for i in range(64))[:hl]
        psk = hmac.new(skey, c1 + c2, h).digest()
        dig = identity_digest(h, psk, b"hostnqn", b"subsysnqn").decode()
        tls = hkdf(h, psk, rfc_label(hl, b"nvme-tls-psk", ("%02d %s" % (hid, dig)).encode()), hl)
        print(hid, psk.hex())
        print(dig)
        print(tls.hex())


K32 = bytes.fromhex("5512DBB6737D0106F65975B773DFB011FFC344BCF442E2DD6D8BC4870B5D5B03")
K48 = K32 + bytes.fromhex("FFC344BCF442E2DD6D8BC4870B5D5B03")
TEST_HOST, TEST_SUB = b"nqn.psk-test-host", b"nqn.psk-test-subsys"
SPEC_HOST = b"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6"
SPEC_SUB = b"nqn.2014-08.org.nvmexpress:uuid:36ebf5a9-1df9-47b3-a6d0-e9ba32e428a2"


def derive(key, h, host, sub, ver, mode):
    length = len(key)
    hid = 1 if length == 32 else 2
    label = rfc_label if mode == "rfc" else compat_label
    retained = hkdf(h, key, label(length, b"HostNQN", host), length)
    if ver == 0:
        ident = b"NVMe0R%02d " % hid + host + b" " + sub
        ctx = ident
    else:
        dig = identity_digest(h, retained, host, sub)
        ident = b"NVMe1R%02d " % hid + host + b" " + sub + b" " + dig
        ctx = b"%02d " % hid + dig
    tls = hkdf(h, retained, label(length, b"nvme-tls-psk", ctx), length)
    return retained.hex(), ident.decode(), tls.hex()


def identities():
    # Which HostNQN label encodings reproduce libnvme's published v1 identity digests.
    for key, h, hid in [(K32, hashlib.sha256, 1), (K48, hashlib.sha384, 2)]:
        length = len(key)
        infos = {
            "rfc": rfc_label(length, b"HostNQN", TEST_HOST),
            "compat_le": compat_label(length, b"HostNQN", TEST_HOST),
            "compat_be": struct.pack(">H", length) + b"tls13 HostNQN" + TEST_HOST,
            "lastonly": TEST_HOST,
            "nolen": b"tls13 HostNQN" + TEST_HOST,
        }
        for name, info in infos.items():
            print(hid, name, identity_digest(h, hkdf(h, key, info, length), TEST_HOST, TEST_SUB).decode())
    print("----")
    for mode in ["rfc", "compat"]:
        for ver in [0, 1]:
            print(mode, ver, "spec", derive(K32, hashlib.sha256, SPEC_HOST, SPEC_SUB, ver, mode))
    for mode in ["rfc", "compat"]:
        print(mode, 1, "test32", derive(K32, hashlib.sha256, TEST_HOST, TEST_SUB, 1, mode))
        print(mode, 1, "test48", derive(K48, hashlib.sha384, TEST_HOST, TEST_SUB, 1, mode))


# RFC 7919 ffdhe2048, generator 2.
FFDHE2048 = int(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695A9E13641146433FBCC939DCE249B3EF97D"
    "2FE363630C75D8F681B202AEC4617AD3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935984F0C"
    "70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797ABC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760"
    "D7F4681D4F42A3DE394DF4AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F619172FE9CE98583"
    "FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005C58EF1837D1683B2C6F34A26C1B2EFFA886B423861285C97FF"
    "FFFFFFFFFFFFFF", 16)


def dhchap():
    secret = base64.b64decode("ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n")[:32]
    kt_host = hmac.new(secret, SPEC_HOST + b"NVMe-over-Fabrics", hashlib.sha256).digest()
    kt_ctrl = hmac.new(secret, SPEC_SUB + b"NVMe-over-Fabrics", hashlib.sha256).digest()
    print("kt_host", kt_host.hex())
    print("kt_ctrl", kt_ctrl.hex())
    # Two fixed private exponents, their public values and the shared secret, padded to 256 bytes.
    x = int.from_bytes(hashlib.sha256(b"nvtcp host exponent").digest(), "big")
    y = int.from_bytes(hashlib.sha256(b"nvtcp controller exponent").digest(), "big")
    gx, gy = pow(2, x, FFDHE2048), pow(2, y, FFDHE2048)
    ks = pow(gy, x, FFDHE2048).to_bytes(256, "big")
    assert ks == pow(gx, y, FFDHE2048).to_bytes(256, "big")
    print("x", "%064x" % x)
    print("gx", gx.to_bytes(256, "big").hex())
    print("y", "%064x" % y)
    print("ks", ks.hex())
    print("sha256(gx)", hashlib.sha256(gx.to_bytes(256, "big")).hexdigest())
    print("sha256(ks)", hashlib.sha256(ks).hexdigest())
    c1 = bytes(range(32))
    ca = hmac.new(hashlib.sha256(ks).digest(), c1, hashlib.sha256).digest()
    print("ca", ca.hex())
    seq, tid = 0x12345678, 0x0102
    head = struct.pack("<IH", seq, tid) + b"\0"
    r1 = hmac.new(kt_host, ca + head + b"HostHost" + SPEC_HOST + b"\0" + SPEC_SUB, hashlib.sha256).digest()
    r2 = hmac.new(kt_ctrl, ca + head + b"Controller" + SPEC_SUB + b"\0" + SPEC_HOST, hashlib.sha256).digest()
    print("r1", r1.hex())
    print("r2", r2.hex())


if __name__ == "__main__":
    which = sys.argv[1:] or ["kunit", "identities", "dhchap"]
    for name in which:
        {"kunit": kunit, "identities": identities, "dhchap": dhchap}[name]()
