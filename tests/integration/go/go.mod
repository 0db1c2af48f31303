module opencf.test/integration

go 1.24.5

require github.com/ThalesGroup/crypto11 v1.5.0

require (
	github.com/miekg/pkcs11 v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/thales-e-security/pool v0.0.2 // indirect
)
