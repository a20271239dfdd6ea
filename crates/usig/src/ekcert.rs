//! Checking a TPM's endorsement-key certificate against the CA certificates an operator pins
//! (the TPM vendors' EK CAs; for swtpm, its local CA), in software.
//!
//! A certificate chain from a pinned root to the EK certificate shows that the EK belongs to a
//! TPM the vendor made (and so that the machine has a real TPM, not software pretending). What
//! is checked: the EK certificate's public key is the enrolled EK; each certificate is signed by
//! the next one (RSA PKCS#1 v1.5 or ECDSA with SHA-256/384) and names it as its issuer; the chain
//! ends at a self-signed certificate of the pinned list, through pinned certificates only. What
//! is not: validity periods (EK certificates often outlive their CA's), revocation, and X.509
//! extensions; a vendor CA that signs carelessly is trusted all the same.

use ring::signature::{self, UnparsedPublicKey};

/// Why an EK certificate is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EkCertError {
    #[error("not a DER X.509 certificate ({0})")]
    Malformed(&'static str),
    #[error("the certificate's public key is not the enrolled endorsement key")]
    OtherKey,
    #[error(
        "no pinned CA certificate issued it (check ek_roots: the vendor's root and intermediates)"
    )]
    Untrusted,
    #[error("unsupported signature algorithm (RSA PKCS#1 v1.5 or ECDSA with SHA-256/384 only)")]
    Unsupported,
    #[error("PEM: {0}")]
    Pem(&'static str),
}

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_SHA256_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
const OID_SHA384_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
/// Longest chain followed (EK certificate, intermediates, root).
const MAX_DEPTH: usize = 6;

/// The parts of a certificate the checks need, borrowed from its DER.
#[derive(Debug)]
struct Cert<'a> {
    tbs: &'a [u8],
    signature_oid: &'a [u8],
    signature: &'a [u8],
    issuer: &'a [u8],
    subject: &'a [u8],
    key_oid: &'a [u8],
    key_params: &'a [u8],
    key: &'a [u8],
}

/// One DER element and what follows it.
struct Element<'a> {
    tag: u8,
    contents: &'a [u8],
    /// The whole element, header included (what a signature covers).
    whole: &'a [u8],
    rest: &'a [u8],
}

fn element(input: &[u8]) -> Result<Element<'_>, EkCertError> {
    let bad = EkCertError::Malformed;
    let (&tag, rest) = input.split_first().ok_or(bad("truncated"))?;
    let (&first, rest) = rest.split_first().ok_or(bad("truncated length"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return Err(bad("length"));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |l, &b| (l << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad("truncated element"));
    }
    let header = input.len() - rest.len();
    Ok(Element {
        tag,
        contents: &rest[..len],
        whole: &input[..header + len],
        rest: &rest[len..],
    })
}

/// The next element, which must have `tag`.
fn take<'a>(input: &'a [u8], tag: u8, what: &'static str) -> Result<Element<'a>, EkCertError> {
    let e = element(input)?;
    if e.tag != tag {
        return Err(EkCertError::Malformed(what));
    }
    Ok(e)
}

/// AlgorithmIdentifier contents: (OID, the parameters' OID if they are one).
fn algorithm(input: &[u8]) -> Result<(&[u8], &[u8]), EkCertError> {
    let oid = take(input, 0x06, "algorithm OID")?;
    let params = match element(oid.rest) {
        Ok(Element {
            tag: 0x06,
            contents,
            ..
        }) => contents,
        _ => &[],
    };
    Ok((oid.contents, params))
}

fn parse(der: &[u8]) -> Result<Cert<'_>, EkCertError> {
    let cert = take(der, 0x30, "certificate")?;
    if !cert.rest.is_empty() {
        return Err(EkCertError::Malformed("trailing bytes"));
    }
    let tbs = take(cert.contents, 0x30, "tbsCertificate")?;
    let sig_alg = take(tbs.rest, 0x30, "signatureAlgorithm")?;
    let (signature_oid, _) = algorithm(sig_alg.contents)?;
    let bits = take(sig_alg.rest, 0x03, "signature")?;
    let signature = bits
        .contents
        .strip_prefix(&[0])
        .ok_or(EkCertError::Malformed("signature bits"))?;
    let mut fields = tbs.contents;
    if fields.first() == Some(&0xa0) {
        fields = element(fields)?.rest; // version
    }
    let serial = take(fields, 0x02, "serialNumber")?;
    let inner_alg = take(serial.rest, 0x30, "signature")?;
    let issuer = take(inner_alg.rest, 0x30, "issuer")?;
    let validity = take(issuer.rest, 0x30, "validity")?;
    let subject = take(validity.rest, 0x30, "subject")?;
    let spki = take(subject.rest, 0x30, "subjectPublicKeyInfo")?;
    let alg = take(spki.contents, 0x30, "key algorithm")?;
    let (key_oid, key_params) = algorithm(alg.contents)?;
    let bits = take(alg.rest, 0x03, "subjectPublicKey")?;
    let key = bits
        .contents
        .strip_prefix(&[0])
        .ok_or(EkCertError::Malformed("key bits"))?;
    Ok(Cert {
        tbs: tbs.whole,
        signature_oid,
        signature,
        issuer: issuer.whole,
        subject: subject.whole,
        key_oid,
        key_params,
        key,
    })
}

/// Whether `issuer`'s key signed `cert` and `cert` names `issuer` as its issuer.
fn signed_by(cert: &Cert, issuer: &Cert) -> Result<bool, EkCertError> {
    if cert.issuer != issuer.subject {
        return Ok(false);
    }
    let algorithm: &dyn signature::VerificationAlgorithm =
        match (cert.signature_oid, issuer.key_oid, issuer.key_params) {
            (OID_SHA256_RSA, OID_RSA, _) => &signature::RSA_PKCS1_2048_8192_SHA256,
            (OID_SHA384_RSA, OID_RSA, _) => &signature::RSA_PKCS1_2048_8192_SHA384,
            (OID_ECDSA_SHA256, OID_EC_PUBLIC_KEY, OID_P256) => &signature::ECDSA_P256_SHA256_ASN1,
            (OID_ECDSA_SHA384, OID_EC_PUBLIC_KEY, OID_P384) => &signature::ECDSA_P384_SHA384_ASN1,
            (OID_ECDSA_SHA256, OID_EC_PUBLIC_KEY, OID_P384) => &signature::ECDSA_P384_SHA256_ASN1,
            (OID_ECDSA_SHA384, OID_EC_PUBLIC_KEY, OID_P256) => &signature::ECDSA_P256_SHA384_ASN1,
            _ => return Err(EkCertError::Unsupported),
        };
    Ok(UnparsedPublicKey::new(algorithm, issuer.key)
        .verify(cert.tbs, cert.signature)
        .is_ok())
}

/// Checks that `certificate` (DER) certifies `ek_public` (SEC1 uncompressed P-256 point) and
/// chains, through certificates of `pinned` (DER), to a self-signed certificate of `pinned`.
pub fn verify_ek_certificate(
    certificate: &[u8],
    ek_public: &[u8; 65],
    pinned: &[Vec<u8>],
) -> Result<(), EkCertError> {
    let leaf = parse(certificate)?;
    if leaf.key_oid != OID_EC_PUBLIC_KEY || leaf.key_params != OID_P256 || leaf.key != ek_public {
        return Err(EkCertError::OtherKey);
    }
    let pinned: Vec<Cert> = pinned.iter().map(|d| parse(d)).collect::<Result<_, _>>()?;
    let mut current = &leaf;
    for _ in 0..MAX_DEPTH {
        let mut next = None;
        for candidate in &pinned {
            if signed_by(current, candidate)? {
                next = Some(candidate);
                break;
            }
        }
        let Some(issuer) = next else {
            return Err(EkCertError::Untrusted);
        };
        if signed_by(issuer, issuer)? {
            return Ok(());
        }
        current = issuer;
    }
    Err(EkCertError::Untrusted)
}

/// The DER certificates of a PEM text (every `CERTIFICATE` block).
pub fn pem_certificates(pem: &str) -> Result<Vec<Vec<u8>>, EkCertError> {
    let mut out = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        match (line, &mut body) {
            ("-----BEGIN CERTIFICATE-----", None) => body = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                out.push(base64_decode(b64)?);
                body = None;
            }
            (l, Some(b64)) => b64.push_str(l),
            _ => {}
        }
    }
    if body.is_some() {
        return Err(EkCertError::Pem("unterminated CERTIFICATE block"));
    }
    if out.is_empty() {
        return Err(EkCertError::Pem("no CERTIFICATE block"));
    }
    Ok(out)
}

fn base64_decode(text: &str) -> Result<Vec<u8>, EkCertError> {
    let value = |c: u8| -> Result<u32, EkCertError> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(EkCertError::Pem("invalid base64")),
        } as u32)
    };
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => return Err(EkCertError::Pem("truncated base64")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_pem() {
        assert_eq!(base64_decode("TWFu").unwrap(), b"Man");
        assert_eq!(base64_decode("TWE=").unwrap(), b"Ma");
        assert_eq!(base64_decode("TQ==").unwrap(), b"M");
        assert!(base64_decode("T").is_err());
        assert!(base64_decode("T$==").is_err());
        let pem = "x\n-----BEGIN CERTIFICATE-----\nTWFu\nTWE=\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(pem).unwrap(), vec![b"ManMa".to_vec()]);
        assert!(pem_certificates("nothing").is_err());
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for bytes in [
            &[][..],
            &[0x30],
            &[0x30, 0x84, 0xff, 0xff, 0xff, 0xff],
            &[0x30, 0x02, 0x02],
        ] {
            assert!(matches!(
                verify_ek_certificate(bytes, &[4; 65], &[]),
                Err(EkCertError::Malformed(_))
            ));
        }
    }
}
