#!/usr/bin/env python3
# Computes retained PSKs, v0/v1 identities and derived TLS PSKs for the NQNs in interop-facts.md 5.x, in the RFC 8446 label encoding and in the legacy libnvme (compat) encoding, to check an implementation against.
# Facts and sources: docs/security/interop-facts.md. Scratch vectors, not the project's implementation.
import hmac,hashlib,base64,struct
def ext(h,salt,ikm): return hmac.new(salt,ikm,h).digest()
def exp(h,prk,info,L):
    out=b'';t=b'';i=1
    while len(out)<L:
        t=hmac.new(prk,t+info+bytes([i]),h).digest();out+=t;i+=1
    return out[:L]
def hkdf(h,ikm,info,L):
    hl=h().digest_size
    return exp(h,ext(h,b'\0'*hl,ikm),info,L)
def rfc_label(L,lab,ctx):
    full=b'tls13 '+lab
    return struct.pack('>H',L)+bytes([len(full)])+full+bytes([len(ctx)])+ctx
k32=bytes.fromhex('5512DBB6737D0106F65975B773DFB011FFC344BCF442E2DD6D8BC4870B5D5B03')
k48=k32+bytes.fromhex('FFC344BCF442E2DD6D8BC4870B5D5B03')
host=b'nqn.psk-test-host'; sub=b'nqn.psk-test-subsys'
for key,h,hid in [(k32,hashlib.sha256,1),(k48,hashlib.sha384,2)]:
    L=len(key)
    variants={
     'rfc': rfc_label(L,b'HostNQN',host),
     'compat_le': struct.pack('<H',L)+b'tls13 '+b'HostNQN'+host,
     'compat_be': struct.pack('>H',L)+b'tls13 '+b'HostNQN'+host,
     'lastonly': host,
     'nolen': b'tls13 '+b'HostNQN'+host,
    }
    for name,info in variants.items():
        ret=hkdf(h,key,info,L)
        dig=base64.b64encode(hmac.new(ret,host+b' '+sub+b' NVMe-over-Fabrics',h).digest()).decode()
        print(hid,name,dig)
print('----')
def derive(key,h,host,sub,ver,mode):
    L=len(key); hid=1 if L==32 else 2
    if mode=='rfc': info=rfc_label(L,b'HostNQN',host)
    else: info=struct.pack('<H',L)+b'tls13 HostNQN'+host
    ret=hkdf(h,key,info,L)
    if ver==0:
        ident=b'NVMe0R%02d '%hid+host+b' '+sub; ctx=ident
    else:
        dig=base64.b64encode(hmac.new(ret,host+b' '+sub+b' NVMe-over-Fabrics',h).digest())
        ident=b'NVMe1R%02d '%hid+host+b' '+sub+b' '+dig; ctx=b'%02d '%hid+dig
    if mode=='rfc': info2=rfc_label(L,b'nvme-tls-psk',ctx)
    else: info2=struct.pack('<H',L)+b'tls13 nvme-tls-psk'+ctx
    tls=hkdf(h,ret,info2,L)
    return ret.hex(),ident.decode(),tls.hex()
sh=b'nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6'
ss=b'nqn.2014-08.org.nvmexpress:uuid:36ebf5a9-1df9-47b3-a6d0-e9ba32e428a2'
for mode in ['rfc','compat']:
  for ver in [0,1]:
    print(mode,ver,'spec',derive(k32,hashlib.sha256,sh,ss,ver,mode))
for mode in ['rfc','compat']:
    print(mode,1,'test32',derive(k32,hashlib.sha256,host,sub,1,mode))
    print(mode,1,'test48',derive(k48,hashlib.sha384,host,sub,1,mode))
