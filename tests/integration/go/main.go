// crypto11 (github.com/ThalesGroup/crypto11) against libopencf.so, token "OpenCF Metaslot"
// (slot 0): RSA, ECDSA and AES keys generated in the token, signatures through crypto.Signer
// verified with the standard library, RSA-OAEP decryption through crypto.Decrypter and
// AES-GCM through cipher.AEAD. One PASS/FAIL line per check.
//
//	go run . LIB PIN
package main

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"os"

	"github.com/ThalesGroup/crypto11"
)

var passed, failed int

func check(name string, fn func() (string, error)) {
	detail, err := fn()
	if err != nil {
		fmt.Printf("FAIL %s: %v\n", name, err)
		failed++
		return
	}
	if detail != "" {
		name += " (" + detail + ")"
	}
	fmt.Printf("PASS %s\n", name)
	passed++
}

func finish() {
	fmt.Printf("go: %d passed, %d failed\n", passed, failed)
	if failed != 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

func main() {
	lib, pin := os.Args[1], os.Args[2]
	var ctx *crypto11.Context
	check("crypto11.Configure with libopencf.so, token OpenCF Metaslot", func() (string, error) {
		var err error
		ctx, err = crypto11.Configure(&crypto11.Config{Path: lib, TokenLabel: "OpenCF Metaslot", Pin: pin})
		return "", err
	})
	if ctx == nil {
		finish()
	}
	defer ctx.Close()

	data := []byte("signed by the OpenCF metaslot through crypto11")
	digest := sha256.Sum256(data)
	var rsaKey, ecKey crypto11.Signer
	var aesKey *crypto11.SecretKey

	check("GenerateRSAKeyPair 2048 in the token", func() (string, error) {
		var err error
		rsaKey, err = ctx.GenerateRSAKeyPairWithLabel([]byte("go-rsa"), []byte("go-rsa"), 2048)
		return "", err
	})
	check("GenerateECDSAKeyPair P-256 in the token", func() (string, error) {
		var err error
		ecKey, err = ctx.GenerateECDSAKeyPairWithLabel([]byte("go-ec"), []byte("go-ec"), elliptic.P256())
		return "", err
	})
	check("GenerateSecretKey AES-256 in the token", func() (string, error) {
		var err error
		aesKey, err = ctx.GenerateSecretKeyWithLabel([]byte("go-aes"), []byte("go-aes"), 256, crypto11.CipherAES)
		return "", err
	})
	check("FindKeyPair finds the RSA key again", func() (string, error) {
		k, err := ctx.FindKeyPair(nil, []byte("go-rsa"))
		if err == nil && k == nil {
			err = fmt.Errorf("not found")
		}
		return "", err
	})
	if rsaKey == nil || ecKey == nil || aesKey == nil {
		finish()
	}

	check("crypto.Signer RSA PKCS#1 v1.5 SHA-256, verified by crypto/rsa", func() (string, error) {
		sig, err := rsaKey.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			return "", err
		}
		return "", rsa.VerifyPKCS1v15(rsaKey.Public().(*rsa.PublicKey), crypto.SHA256, digest[:], sig)
	})
	check("crypto.Signer RSA-PSS SHA-256, verified by crypto/rsa", func() (string, error) {
		opts := &rsa.PSSOptions{SaltLength: 32, Hash: crypto.SHA256}
		sig, err := rsaKey.Sign(rand.Reader, digest[:], opts)
		if err != nil {
			return "", err
		}
		return "", rsa.VerifyPSS(rsaKey.Public().(*rsa.PublicKey), crypto.SHA256, digest[:], sig, opts)
	})
	check("crypto.Signer ECDSA P-256, verified by crypto/ecdsa", func() (string, error) {
		sig, err := ecKey.Sign(rand.Reader, digest[:], crypto.SHA256)
		if err != nil {
			return "", err
		}
		if !ecdsa.VerifyASN1(ecKey.Public().(*ecdsa.PublicKey), digest[:], sig) {
			return "", fmt.Errorf("signature does not verify")
		}
		return "", nil
	})
	check("crypto.Decrypter RSA-OAEP SHA-256 (crypto/rsa encrypts)", func() (string, error) {
		ct, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, rsaKey.Public().(*rsa.PublicKey), data, nil)
		if err != nil {
			return "", err
		}
		dec, ok := rsaKey.(crypto11.SignerDecrypter)
		if !ok {
			return "", fmt.Errorf("the RSA key is not a crypto.Decrypter")
		}
		pt, err := dec.Decrypt(rand.Reader, ct, &rsa.OAEPOptions{Hash: crypto.SHA256})
		if err == nil && !bytes.Equal(pt, data) {
			err = fmt.Errorf("decryption differs")
		}
		return "", err
	})
	check("cipher.AEAD AES-GCM in the token: round trip, forgery rejected", func() (string, error) {
		aead, err := aesKey.NewGCM()
		if err != nil {
			return "", err
		}
		nonce := make([]byte, aead.NonceSize())
		if _, err := rand.Read(nonce); err != nil {
			return "", err
		}
		ct := aead.Seal(nil, nonce, data, []byte("aad"))
		pt, err := aead.Open(nil, nonce, ct, []byte("aad"))
		if err != nil {
			return "", err
		}
		if !bytes.Equal(pt, data) {
			return "", fmt.Errorf("round trip differs")
		}
		ct[0] ^= 1
		if _, err := aead.Open(nil, nonce, ct, []byte("aad")); err == nil {
			return "", fmt.Errorf("a forged ciphertext decrypted")
		}
		return "", nil
	})
	finish()
}
