//! The few DER encodings PKCS#11 attributes and mechanisms need:
//! `CKA_EC_PARAMS` (an OBJECT IDENTIFIER), `CKA_EC_POINT` (an OCTET STRING),
//! and the strict decoding of DER ECDSA signatures into the `r || s` form
//! that `CKM_ECDSA*` takes.

/// Appends a DER definite length.
fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// DER OBJECT IDENTIFIER for dotted `arcs` (at least two arcs).
pub fn oid(arcs: &[u64]) -> Vec<u8> {
    assert!(arcs.len() >= 2, "an OID has at least two arcs");
    let mut body = Vec::new();
    let mut push_arc = |mut v: u64| {
        let mut tmp = vec![(v & 0x7f) as u8];
        v >>= 7;
        while v > 0 {
            tmp.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        tmp.reverse();
        body.extend_from_slice(&tmp);
    };
    push_arc(arcs[0] * 40 + arcs[1]);
    for a in &arcs[2..] {
        push_arc(*a);
    }
    let mut out = vec![0x06];
    push_len(&mut out, body.len());
    out.extend_from_slice(&body);
    out
}

/// DER OCTET STRING wrapping `bytes`.
pub fn octet_string(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0x04];
    push_len(&mut out, bytes.len());
    out.extend_from_slice(bytes);
    out
}

/// Reads one DER TLV with tag `tag` from the front of `input`, requiring the
/// minimal definite length encoding; returns (contents, rest).
fn read_tlv(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), &'static str> {
    let (&t, rest) = input.split_first().ok_or("truncated: missing tag")?;
    if t != tag {
        return Err("unexpected tag");
    }
    let (&first, mut rest) = rest.split_first().ok_or("truncated: missing length")?;
    let len = if first < 0x80 {
        first as usize
    } else if first == 0x80 {
        return Err("indefinite length");
    } else {
        let n = (first & 0x7f) as usize;
        if n > std::mem::size_of::<usize>() || rest.len() < n {
            return Err("bad long-form length");
        }
        let (len_bytes, r) = rest.split_at(n);
        rest = r;
        if len_bytes[0] == 0 {
            return Err("length with leading zero byte");
        }
        let len = len_bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        if len < 0x80 {
            return Err("long-form length for a short length");
        }
        len
    };
    if rest.len() < len {
        return Err("truncated contents");
    }
    Ok(rest.split_at(len))
}

/// Reads a non-negative, minimally encoded INTEGER; returns its magnitude
/// without leading zero bytes, and the rest.
fn read_uint(input: &[u8]) -> Result<(&[u8], &[u8]), &'static str> {
    let (v, rest) = read_tlv(input, 0x02)?;
    match v {
        [] => Err("empty INTEGER"),
        [b, ..] if b & 0x80 != 0 => Err("negative INTEGER"),
        [0, next, ..] if next & 0x80 == 0 => Err("INTEGER with a superfluous leading zero"),
        [0, rest_v @ ..] if !rest_v.is_empty() => Ok((rest_v, rest)),
        [0] => Ok((&[], rest)),
        _ => Ok((v, rest)),
    }
}

/// Converts a DER `ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }`
/// into `r || s`, each left-padded to `scalar_len` bytes, as `CKM_ECDSA`
/// expects. Anything that is not strict DER is refused, as is an integer
/// that does not fit in `scalar_len` bytes (it cannot be below the group
/// order, so the signature is invalid either way).
pub fn ecdsa_der_to_raw(der: &[u8], scalar_len: usize) -> Result<Vec<u8>, &'static str> {
    let (seq, trailing) = read_tlv(der, 0x30)?;
    if !trailing.is_empty() {
        return Err("bytes after the SEQUENCE");
    }
    let (r, rest) = read_uint(seq)?;
    let (s, rest) = read_uint(rest)?;
    if !rest.is_empty() {
        return Err("bytes after s inside the SEQUENCE");
    }
    if r.len() > scalar_len || s.len() > scalar_len {
        return Err("integer longer than the group order");
    }
    let mut out = vec![0u8; 2 * scalar_len];
    out[scalar_len - r.len()..scalar_len].copy_from_slice(r);
    out[2 * scalar_len - s.len()..].copy_from_slice(s);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids() {
        assert_eq!(
            oid(&[1, 2, 840, 10045, 3, 1, 7]),
            hex::decode("06082a8648ce3d030107").unwrap()
        );
        assert_eq!(
            oid(&[1, 3, 132, 0, 34]),
            hex::decode("06052b81040022").unwrap()
        );
        assert_eq!(oid(&[1, 3, 101, 112]), hex::decode("06032b6570").unwrap());
    }

    #[test]
    fn octet_strings() {
        assert_eq!(octet_string(&[1, 2]), vec![4, 2, 1, 2]);
        let long = vec![7u8; 133];
        let enc = octet_string(&long);
        assert_eq!(&enc[..3], &[4, 0x81, 133]);
        assert_eq!(enc.len(), 136);
    }

    #[test]
    fn der_signatures() {
        // r = 1, s = 0x80 (needs a leading zero).
        let der = hex::decode("3007020101020200 80".replace(' ', "")).unwrap();
        let raw = ecdsa_der_to_raw(&der, 4).unwrap();
        assert_eq!(raw, vec![0, 0, 0, 1, 0, 0, 0, 0x80]);
        // Superfluous leading zero.
        let bad = hex::decode("30080202000102020080").unwrap();
        assert!(ecdsa_der_to_raw(&bad, 4).is_err());
        // Negative.
        let neg = hex::decode("3006020181020101").unwrap();
        assert!(ecdsa_der_to_raw(&neg, 4).is_err());
        // Long-form length for a short length.
        let lf = hex::decode("308106020101020101").unwrap();
        assert!(ecdsa_der_to_raw(&lf, 4).is_err());
        // Trailing garbage.
        let tr = hex::decode("300602010102010100").unwrap();
        assert!(ecdsa_der_to_raw(&tr, 4).is_err());
        // Zero is a well-formed INTEGER.
        let zero = hex::decode("3006020100020101").unwrap();
        assert_eq!(ecdsa_der_to_raw(&zero, 2).unwrap(), vec![0, 0, 0, 1]);
    }
}
