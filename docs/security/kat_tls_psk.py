#!/usr/bin/env python3
# Reproduces the kernel KUnit NVMe TLS values (interop-facts.md 5.x): the PSK digest, the v1 identity digest and the derived TLS PSK for SHA-256 and SHA-384, from the KUnit test's inputs.
# Facts and sources: docs/security/interop-facts.md. Scratch vectors, not the project's implementation.
import hmac,hashlib,base64,struct
def hkdf_extract(h,salt,ikm): return hmac.new(salt,ikm,h).digest()
def hkdf_expand(h,prk,info,L):
    out=b'';t=b'';i=1
    while len(out)<L:
        t=hmac.new(prk,t+info+bytes([i]),h).digest();out+=t;i+=1
    return out[:L]
def label(L,lab,ctx):
    full=b'tls13 '+lab
    return struct.pack('>H',L)+bytes([len(full)])+full+bytes([len(ctx)])+ctx
for hid,h,hl in [(1,hashlib.sha256,32),(2,hashlib.sha384,48)]:
    skey=bytes(ord('A')+i for i in range(64))[:hl]
    c1=bytes(range(64))[:hl]; c2=bytes(0xff-i for i in range(64))[:hl]
    psk=hmac.new(skey,c1+c2,h).digest()
    dig=base64.b64encode(hmac.new(psk,b'hostnqn subsysnqn NVMe-over-Fabrics',h).digest()).decode()
    prk=hkdf_extract(h,b'\0'*hl,psk)
    ctx=('%02d %s'%(hid,dig)).encode()
    tls=hkdf_expand(h,prk,label(hl,b'nvme-tls-psk',ctx),hl)
    print(hid,psk.hex()); print(dig); print(tls.hex())
