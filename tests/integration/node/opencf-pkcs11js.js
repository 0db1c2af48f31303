// pkcs11js against libopencf.so slot 0 ("OpenCF Metaslot"): RSA, EC and AES keys generated
// in the token, signatures (RSA PKCS#1 v1.5, RSA-PSS, ECDSA) verified with Node's crypto,
// RSA-OAEP decryption of a ciphertext Node's crypto made, and AES-GCM. One PASS/FAIL line
// per check.
//
//   node opencf-pkcs11js.js LIB PIN
"use strict";
const crypto = require("crypto");
const pkcs11js = require("pkcs11js");

const [lib, pin] = process.argv.slice(2);
let passed = 0;
let failed = 0;

function check(name, fn) {
  try {
    const detail = fn();
    console.log(`PASS ${name}${detail ? ` (${detail})` : ""}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${name}: ${e && e.message ? e.message : e}`);
    failed++;
  }
}

function finish() {
  console.log(`node: ${passed} passed, ${failed} failed`);
  process.exit(failed === 0 ? 0 : 1);
}

const p = new pkcs11js.PKCS11();
const data = Buffer.from("signed by the OpenCF metaslot through pkcs11js");
let session = null;
const keys = {};

function b64url(buf) {
  return Buffer.from(buf).toString("base64url");
}

function attr(handle, type) {
  return p.C_GetAttributeValue(session, handle, [{ type }])[0].value;
}

function sign(mechanism, key) {
  p.C_SignInit(session, mechanism, key);
  return p.C_Sign(session, data, Buffer.alloc(1024));
}

check("pkcs11js loads libopencf.so, slot 0 is the metaslot, login", () => {
  p.load(lib);
  p.C_Initialize();
  const slot = p.C_GetSlotList(true)[0];
  const label = p.C_GetTokenInfo(slot).label.trim();
  if (label !== "OpenCF Metaslot") throw new Error(`slot 0 is ${label}`);
  session = p.C_OpenSession(slot, pkcs11js.CKF_RW_SESSION | pkcs11js.CKF_SERIAL_SESSION);
  p.C_Login(session, pkcs11js.CKU_USER, pin);
  return label;
});
if (session === null) finish();

check("generate RSA-2048 key pair", () => {
  const kp = p.C_GenerateKeyPair(session, { mechanism: pkcs11js.CKM_RSA_PKCS_KEY_PAIR_GEN }, [
    { type: pkcs11js.CKA_TOKEN, value: true },
    { type: pkcs11js.CKA_LABEL, value: "node-rsa" },
    { type: pkcs11js.CKA_MODULUS_BITS, value: 2048 },
    { type: pkcs11js.CKA_PUBLIC_EXPONENT, value: Buffer.from([1, 0, 1]) },
    { type: pkcs11js.CKA_VERIFY, value: true },
    { type: pkcs11js.CKA_ENCRYPT, value: true },
  ], [
    { type: pkcs11js.CKA_TOKEN, value: true },
    { type: pkcs11js.CKA_LABEL, value: "node-rsa" },
    { type: pkcs11js.CKA_PRIVATE, value: true },
    { type: pkcs11js.CKA_SENSITIVE, value: true },
    { type: pkcs11js.CKA_EXTRACTABLE, value: false },
    { type: pkcs11js.CKA_SIGN, value: true },
    { type: pkcs11js.CKA_DECRYPT, value: true },
  ]);
  keys.rsa = kp;
  keys.rsaPub = crypto.createPublicKey({ format: "jwk", key: {
    kty: "RSA", n: b64url(attr(kp.publicKey, pkcs11js.CKA_MODULUS)),
    e: b64url(attr(kp.publicKey, pkcs11js.CKA_PUBLIC_EXPONENT)) } });
});

check("generate EC P-256 key pair", () => {
  const kp = p.C_GenerateKeyPair(session, { mechanism: pkcs11js.CKM_EC_KEY_PAIR_GEN }, [
    { type: pkcs11js.CKA_TOKEN, value: true },
    { type: pkcs11js.CKA_LABEL, value: "node-ec" },
    { type: pkcs11js.CKA_EC_PARAMS, value: Buffer.from("06082a8648ce3d030107", "hex") },
    { type: pkcs11js.CKA_VERIFY, value: true },
  ], [
    { type: pkcs11js.CKA_TOKEN, value: true },
    { type: pkcs11js.CKA_LABEL, value: "node-ec" },
    { type: pkcs11js.CKA_PRIVATE, value: true },
    { type: pkcs11js.CKA_SENSITIVE, value: true },
    { type: pkcs11js.CKA_SIGN, value: true },
  ]);
  const point = attr(kp.publicKey, pkcs11js.CKA_EC_POINT); // DER OCTET STRING of 04||X||Y
  if (point[0] !== 0x04 || point[1] !== 65 || point[2] !== 0x04) throw new Error("unexpected CKA_EC_POINT");
  keys.ec = kp;
  keys.ecPub = crypto.createPublicKey({ format: "jwk", key: {
    kty: "EC", crv: "P-256", x: b64url(point.subarray(3, 35)), y: b64url(point.subarray(35, 67)) } });
});

check("generate AES-256 key", () => {
  keys.aes = p.C_GenerateKey(session, { mechanism: pkcs11js.CKM_AES_KEY_GEN }, [
    { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
    { type: pkcs11js.CKA_TOKEN, value: true },
    { type: pkcs11js.CKA_LABEL, value: "node-aes" },
    { type: pkcs11js.CKA_VALUE_LEN, value: 32 },
    { type: pkcs11js.CKA_SENSITIVE, value: true },
    { type: pkcs11js.CKA_ENCRYPT, value: true },
    { type: pkcs11js.CKA_DECRYPT, value: true },
  ]);
});
if (!keys.rsa || !keys.ec || !keys.aes) finish();

check("sign CKM_SHA256_RSA_PKCS, verified by node:crypto", () => {
  const sig = sign({ mechanism: pkcs11js.CKM_SHA256_RSA_PKCS }, keys.rsa.privateKey);
  if (!crypto.verify("sha256", data, keys.rsaPub, sig)) throw new Error("signature does not verify");
});

check("sign CKM_SHA256_RSA_PKCS_PSS, verified by node:crypto", () => {
  const sig = sign({ mechanism: pkcs11js.CKM_SHA256_RSA_PKCS_PSS, parameter: {
    type: pkcs11js.CK_PARAMS_RSA_PSS, hashAlg: pkcs11js.CKM_SHA256, mgf: pkcs11js.CKG_MGF1_SHA256, saltLen: 32,
  } }, keys.rsa.privateKey);
  const ok = crypto.verify("sha256", data, {
    key: keys.rsaPub, padding: crypto.constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 }, sig);
  if (!ok) throw new Error("signature does not verify");
});

check("sign CKM_ECDSA_SHA256, verified by node:crypto", () => {
  const sig = sign({ mechanism: pkcs11js.CKM_ECDSA_SHA256 }, keys.ec.privateKey);
  if (!crypto.verify("sha256", data, { key: keys.ecPub, dsaEncoding: "ieee-p1363" }, sig)) {
    throw new Error("signature does not verify");
  }
});

check("decrypt CKM_RSA_PKCS_OAEP (node:crypto encrypts)", () => {
  const ct = crypto.publicEncrypt({ key: keys.rsaPub, padding: crypto.constants.RSA_PKCS1_OAEP_PADDING,
    oaepHash: "sha256" }, data);
  p.C_DecryptInit(session, { mechanism: pkcs11js.CKM_RSA_PKCS_OAEP, parameter: {
    type: pkcs11js.CK_PARAMS_RSA_OAEP, hashAlg: pkcs11js.CKM_SHA256, mgf: pkcs11js.CKG_MGF1_SHA256,
    source: 1 /* CKZ_DATA_SPECIFIED */ } }, keys.rsa.privateKey);
  const pt = p.C_Decrypt(session, ct, Buffer.alloc(256));
  if (!pt.equals(data)) throw new Error("decryption differs");
});

check("encrypt and decrypt CKM_AES_GCM, forgery rejected", () => {
  const iv = crypto.randomBytes(12);
  // CK_PARAMS_AES_GCM_v240 fills the CK_GCM_PARAMS of PKCS#11 2.40/3.x, ulIvBits included;
  // pkcs11js 2.1.7's CK_PARAMS_AES_GCM leaves ulIvBits uninitialized (malloc'd), and OpenCF
  // answers CKR_MECHANISM_PARAM_INVALID when ulIvBits is neither 0 nor 8 * ulIvLen.
  const gcm = () => ({ mechanism: pkcs11js.CKM_AES_GCM, parameter: {
    type: pkcs11js.CK_PARAMS_AES_GCM_v240, iv, aad: Buffer.from("aad"), ivBits: 96, tagBits: 128 } });
  p.C_EncryptInit(session, gcm(), keys.aes);
  const ct = Buffer.from(p.C_Encrypt(session, data, Buffer.alloc(data.length + 16)));
  p.C_DecryptInit(session, gcm(), keys.aes);
  const pt = p.C_Decrypt(session, ct, Buffer.alloc(ct.length));
  if (!pt.equals(data)) throw new Error("round trip differs");
  ct[0] ^= 1;
  p.C_DecryptInit(session, gcm(), keys.aes);
  try {
    p.C_Decrypt(session, ct, Buffer.alloc(ct.length));
  } catch (e) {
    return `forgery: ${e.message.split(":")[0]}`;
  }
  throw new Error("a forged ciphertext decrypted");
});

p.C_Logout(session);
p.C_CloseSession(session);
p.C_Finalize();
finish();
