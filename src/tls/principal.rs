//! The principal of a mutual-TLS client: its certificate's subject as an RFC 2253
//! distinguished name, as Kafka's default `ssl.principal.mapping.rules` gives it
//! (`CN=alice,OU=payments,O=acme`: most specific first, no spaces), for ACLs and quotas.

use x509_parser::prelude::{FromDer, X509Certificate};

/// The subject of a DER certificate in RFC 2253 form; `None` for bytes that are not a
/// certificate (rustls verified the chain; this only reads it) or an empty subject.
pub fn subject_dn(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let parts: Vec<String> = rdn
            .iter()
            .map(|atv| {
                let key = x509_parser::objects::oid2abbrev(
                    atv.attr_type(),
                    x509_parser::objects::oid_registry(),
                )
                .map(str::to_string)
                .unwrap_or_else(|_| atv.attr_type().to_id_string());
                let value = atv
                    .as_str()
                    .map(escape)
                    .unwrap_or_else(|_| format!("#{}", hex(atv.attr_value().data)));
                format!("{key}={value}")
            })
            .collect();
        rdns.push(parts.join("+"));
    }
    // RFC 2253 lists the RDNs in reverse of their order in the certificate.
    rdns.reverse();
    let dn = rdns.join(",");
    (!dn.is_empty()).then_some(dn)
}

/// RFC 2253 escaping of an attribute value.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        let edge = (i == 0 && (c == ' ' || c == '#')) || (i + 1 == v.chars().count() && c == ' ');
        if edge || matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_reads_most_specific_first_with_escapes() {
        let mut params = rcgen_params();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CountryName, "DE");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Acme, Inc");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_dn(cert.der()).as_deref(),
            Some("CN=alice,O=Acme\\, Inc,C=DE")
        );
        assert_eq!(subject_dn(b"not a certificate"), None);
    }

    fn rcgen_params() -> rcgen::CertificateParams {
        rcgen::CertificateParams::new(Vec::<String>::new()).unwrap()
    }
}
