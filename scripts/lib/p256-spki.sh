# shellcheck shell=bash
# p256_spki ID: reads `pkcs11-tool --list-objects` output on stdin and writes to stdout the
# DER SubjectPublicKeyInfo of the P-256 public key whose CKA_ID is ID (hex, as pkcs11-tool
# prints it), built from the CKA_EC_POINT the listing shows. Fails (status 1, a message on
# stderr) when no such key is listed.
#
# Why not `pkcs11-tool --read-object --type pubkey`: pkcs11-tool 0.23 (Debian 12) frees its
# OSSL_PARAM data before it calls EVP_PKEY_fromdata on an EC public key (valgrind: "Invalid
# read ... inside a block of size 256 free'd" under EVP_PKEY_fromdata, whichever module is
# loaded), so that export works or fails ("cannot create EVP_PKEY") with the layout of the
# process's heap. RSA public keys take another path and are not affected.
p256_spki() {
    local id="$1" point hex
    point="$(awk -v id="$id" '
        /^Public Key Object/ { pt = "" }
        $1 == "EC_POINT:" { pt = $2 }
        $1 == "ID:" && $2 == id && pt != "" { print pt; exit }')"
    # CKA_EC_POINT is the DER OCTET STRING 04 41 <uncompressed point>.
    case "$point" in
        044104*) ;;
        *) echo "p256_spki: no P-256 EC_POINT listed for id $id" >&2; return 1 ;;
    esac
    # id-ecPublicKey, prime256v1, and the point as a BIT STRING.
    hex="3059301306072a8648ce3d020106082a8648ce3d030107034200${point#0441}"
    # shellcheck disable=SC2059 # the format is the bytes, as \xHH escapes
    printf "$(printf '%s' "$hex" | sed 's/../\\x&/g')"
}
