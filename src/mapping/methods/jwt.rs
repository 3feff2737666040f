//! JSON Web Tokens: signing an object of claims and verifying a token to get its claims,
//! with an HMAC secret (HS*), an RSA key (RS*, PKCS #1 v1.5) or an ECDSA key (ES*).
//! RSA and ECDSA keys are PEM text: private keys as PKCS #1 (`RSA PRIVATE KEY`), SEC 1
//! (`EC PRIVATE KEY`) or PKCS #8 (`PRIVATE KEY`); public keys as `PUBLIC KEY` (or PKCS #1
//! `RSA PUBLIC KEY`). Claims are not validated (no `exp` or `nbf` check), as in Bloblang.

use aws_lc_rs::signature::{self, EcdsaKeyPair, RsaKeyPair};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use hmac::Hmac;

use super::encoding::hmac_of;
use super::{raw, text, Memo};
use crate::mapping::exec::V;
use crate::mapping::spec::{ex, method, p, Args, MethodSpec, Res};
use crate::value::Value;

const CAT: &str = "JSON Web Tokens";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Hmac,
    Rsa,
    Ecdsa,
}

/// An algorithm: its family and SHA-2 size (256, 384 or 512).
#[derive(Clone, Copy, Debug)]
struct Alg(Family, u16);

impl Alg {
    fn name(self) -> String {
        let prefix = match self.0 {
            Family::Hmac => "HS",
            Family::Rsa => "RS",
            Family::Ecdsa => "ES",
        };
        format!("{prefix}{}", self.1)
    }
}

/// Reference tokens and keys: the HS ones are signed with `dont-tell-anyone`.
const CLAIMS: &str = r#"{"claims":{"iat":1516239022,"mood":"Disdainful","sub":"1234567890"}}"#;
/// `root.claims = this.signed.parse_jwt_X("""KEY""")`, built at compile time.
macro_rules! parse_ex {
    ($alg:literal, $key:expr) => {
        concat!(
            "root.claims = this.signed.parse_jwt_",
            $alg,
            "(\"\"\"",
            $key,
            "\"\"\")"
        )
    };
}

/// A round trip through a key pair kept in `testdata/`.
macro_rules! round_trip_ex {
    ($alg:literal, $private:literal, $public:literal) => {
        ex(
            concat!(
                "root = this.sign_jwt_",
                $alg,
                "(\"\"\"",
                include_str!(concat!("testdata/", $private)),
                "\"\"\").parse_jwt_",
                $alg,
                "(\"\"\"",
                include_str!(concat!("testdata/", $public)),
                "\"\"\")"
            ),
            r#"{"sub":"user123","n":[1,2]}"#,
            r#"{"sub":"user123","n":[1,2]}"#,
        )
    };
}

macro_rules! rs_pub {
    () => {
        "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAs/ibN8r68pLMR6gRzg4S
8v8l6Q7yi8qURjkEbcNeM1rkokC7xh0I4JVTwxYSVv/JIW8qJdyspl5NIfuAVi32
WfKvSAs+NIs+DMsNPYw3yuQals4AX8hith1YDvYpr8SD44jxhz/DR9lYKZFGhXGB
+7NqQ7vpTWp3BceLYocazWJgusZt7CgecIq57ycM5hjM93BvlrUJ8nQ1a46wfL/8
Cy4P0et70hzZrsjjN41KFhKY0iUwlyU41yEiDHvHDDsTMBxAZosWjSREGfJL6Mfp
XOInTHs/Gg6DZMkbxjQu6L06EdJ+Q/NwglJdAXM7Zo9rNELqRig6DdvG5JesdMsO
+QIDAQAB
-----END PUBLIC KEY-----"
    };
}

pub static SPECS: &[MethodSpec] = &[
    method("parse_jwt_hs256", CAT, "Verifies an HS256-signed JWT with the secret and gives its claims.", &[p("signing_secret")],
        &[ex(r#"root.claims = this.signed.parse_jwt_hs256("""dont-tell-anyone""")"#,
             r#"{"signed":"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.YwXOM8v3gHVWcQRRRQc_zDlhmLnM62fwhFYGpiA0J1A"}"#, CLAIMS),
          ex(r#"root = {"sub": "u1"}.sign_jwt_hs256("secret").parse_jwt_hs256("wrong")"#, "{}", "error:signature does not match"),
          ex(r#"root = "not.a-token".parse_jwt_hs256("secret")"#, "{}", "error:three dot-separated parts"),
          ex(r#"root = {"sub": "u1"}.sign_jwt_hs384("secret").parse_jwt_hs256("secret")"#, "{}", "error:signed with HS384, not HS256")],
        parse_hs256),
    method("parse_jwt_hs384", CAT, "Verifies an HS384-signed JWT with the secret and gives its claims.", &[p("signing_secret")],
        &[ex(r#"root.claims = this.signed.parse_jwt_hs384("""dont-tell-anyone""")"#,
             r#"{"signed":"eyJhbGciOiJIUzM4NCIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.2Y8rf_ijwN4t8hOGGViON_GrirLkCQVbCOuax6EoZ3nluX0tCGezcJxbctlIfsQ2"}"#, CLAIMS)],
        parse_hs384),
    method("parse_jwt_hs512", CAT, "Verifies an HS512-signed JWT with the secret and gives its claims.", &[p("signing_secret")],
        &[ex(r#"root.claims = this.signed.parse_jwt_hs512("""dont-tell-anyone""")"#,
             r#"{"signed":"eyJhbGciOiJIUzUxMiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.utRb0urG6LGGyranZJVo5Dk0Fns1QNcSUYPN0TObQ-YzsGGB8jrxHwM5NAJccjJZzKectEUqmmKCaETZvuX4Fg"}"#, CLAIMS)],
        parse_hs512),
    method("parse_jwt_rs256", CAT, "Verifies an RS256-signed JWT with the RSA public key (PEM) and gives its claims.", &[p("signing_secret")],
        &[ex(parse_ex!("rs256", rs_pub!()),
             r#"{"signed":"eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.b0lH3jEupZZ4zoaly4Y_GCvu94HH6UKdKY96zfGNsIkPZpQLHIkZ7jMWlLlNOAd8qXlsBGP_i8H2qCKI4zlWJBGyPZgxXDzNRPVrTDfFpn4t4nBcA1WK2-ntXP3ehQxsaHcQU8Z_nsogId7Pme5iJRnoHWEnWtbwz5DLSXL3ZZNnRdrHM9MdI7QSDz9mojKDCaMpGN9sG7Xl-tGdBp1XzXuUOzG8S03mtZ1IgVR1uiBL2N6oohHIAunk8DIAmNWI-zgycTgzUGU7mvPkKH43qO8Ua1-13tCUBKKa8VxcotZ67Mxm1QAvBGoDnTKwWMwghLzs6d6WViXQg6eWlJcpBA"}"#, CLAIMS),
          ex(parse_ex!("rs256", "not a key"), r#"{"signed":"eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.e30.AA"}"#, "error:no PEM block")],
        parse_rs256),
    method("parse_jwt_rs384", CAT, "Verifies an RS384-signed JWT with the RSA public key (PEM) and gives its claims.", &[p("signing_secret")],
        &[ex(parse_ex!("rs384", rs_pub!()),
             r#"{"signed":"eyJhbGciOiJSUzM4NCIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.orcXYBcjVE5DU7mvq4KKWFfNdXR4nEY_xupzWoETRpYmQZIozlZnM_nHxEk2dySvpXlAzVm7kgOPK2RFtGlOVaNRIa3x-pMMr-bhZTno4L8Hl4sYxOks3bWtjK7wql4uqUbqThSJB12psAXw2-S-I_FMngOPGIn4jDT9b802ottJSvTpXcy0-eKTjrV2PSkRRu-EYJh0CJZW55MNhqlt6kCGhAXfbhNazN3ASX-dmpd_JixyBKphrngr_zRA-FCn_Xf3QQDA-5INopb4Yp5QiJ7UxVqQEKI80X_JvJqz9WE1qiAw8pq5-xTen1t7zTP-HT1NbbD3kltcNa3G8acmNg"}"#, CLAIMS)],
        parse_rs384),
    method("parse_jwt_rs512", CAT, "Verifies an RS512-signed JWT with the RSA public key (PEM) and gives its claims.", &[p("signing_secret")],
        &[ex(parse_ex!("rs512", rs_pub!()),
             r#"{"signed":"eyJhbGciOiJSUzUxMiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.rsMp_X5HMrUqKnZJIxo27aAoscovRA6SSQYR9rq7pifIj0YHXxMyNyOBDGnvVALHKTi25VUGHpfNUW0VVMmae0A4t_ObNU6hVZHguWvetKZZq4FZpW1lgWHCMqgPGwT5_uOqwYCH6r8tJuZT3pqXeL0CY4putb1AN2w6CVp620nh3l8d3XWb4jaifycd_4CEVCqHuWDmohfug4VhmoVKlIXZkYoAQowgHlozATDssBSWdYtv107Wd2AzEoiXPu6e3pflsuXULlyqQnS4ELEKPYThFLafh1NqvZDPddqozcPZ-iODBW-xf3A4DYDdivnMYLrh73AZOGHexxu8ay6nDA"}"#, CLAIMS)],
        parse_rs512),
    method("parse_jwt_es256", CAT, "Verifies an ES256-signed JWT with the P-256 public key (PEM) and gives its claims.", &[p("signing_secret")],
        &[ex(parse_ex!("es256", "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEGtLqIBePHmIhQcf0JLgc+F/4W/oI
dp0Gta53G35VerNDgUUXmp78J2kfh4qLdh0XtmOMI587tCaqjvDAXfs//w==
-----END PUBLIC KEY-----"),
             r#"{"signed":"eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.GIRajP9JJbpTlqSCdNEz4qpQkRvzX4Q51YnTwVyxLDM9tKjR_a8ggHWn9CWj7KG0x8J56OWtmUxn112SRTZVhQ"}"#, CLAIMS),
          ex(parse_ex!("es256", rs_pub!()),
             r#"{"signed":"eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.GIRajP9JJbpTlqSCdNEz4qpQkRvzX4Q51YnTwVyxLDM9tKjR_a8ggHWn9CWj7KG0x8J56OWtmUxn112SRTZVhQ"}"#,
             "error:not a valid ES256 public key")],
        parse_es256),
    method("parse_jwt_es384", CAT, "Verifies an ES384-signed JWT with the P-384 public key (PEM) and gives its claims.", &[p("signing_secret")],
        &[ex(parse_ex!("es384", "-----BEGIN PUBLIC KEY-----
MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAERoz74/B6SwmLhs8X7CWhnrWyRrB13AuU
8OYeqy0qHRu9JWNw8NIavqpTmu6XPT4xcFanYjq8FbeuM11eq06C52mNmS4LLwzA
2imlFEgn85bvJoC3bnkuq4mQjwt9VxdH
-----END PUBLIC KEY-----"),
             r#"{"signed":"eyJhbGciOiJFUzM4NCIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.H2HBSlrvQBaov2tdreGonbBexxtQB-xzaPL4-tNQZ6TVh7VH8VBcSwcWHYa1lBAHmdsKOFcB2Wk0SB7QWeGT3ptSgr-_EhDMaZ8bA5spgdpq5DsKfaKHrd7DbbQlmxNq"}"#, CLAIMS)],
        parse_es384),
    method("parse_jwt_es512", CAT, "Verifies an ES512-signed JWT with the P-521 public key (PEM) and gives its claims.", &[p("signing_secret")],
        &[ex(parse_ex!("es512", "-----BEGIN PUBLIC KEY-----
MIGbMBAGByqGSM49AgEGBSuBBAAjA4GGAAQAkHLdts9P56fFkyhpYQ31M/Stwt3w
vpaxhlfudxnXgTO1IP4RQRgryRxZ19EUzhvWDcG3GQIckoNMY5PelsnCGnIBT2Xh
9NQkjWF5K6xS4upFsbGSAwQ+GIyyk5IPJ2LHgOyMSCVh5gRZXV3CZLzXujx/umC9
UeYyTt05zRRWuD+p5bY=
-----END PUBLIC KEY-----"),
             r#"{"signed":"eyJhbGciOiJFUzUxMiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE1MTYyMzkwMjIsIm1vb2QiOiJEaXNkYWluZnVsIiwic3ViIjoiMTIzNDU2Nzg5MCJ9.ACrpLuU7TKpAnncDCpN9m85nkL55MJ45NFOBl6-nEXmNT1eIxWjiP4pwWVbFH9et_BgN14119jbL_KqEJInPYc9nAXC6dDLq0aBU-dalvNl4-O5YWpP43-Y-TBGAsWnbMTrchILJ4-AEiICe73Ck5yWPleKg9c3LtkEFWfGs7BoPRguZ"}"#, CLAIMS)],
        parse_es512),
    method("sign_jwt_hs256", CAT, "Signs an object of claims as an HS256 JWT with the secret.", &[p("signing_secret")],
        &[ex(r#"root.signed = this.claims.sign_jwt_hs256("""dont-tell-anyone""")"#, r#"{"claims":{"sub":"user123"}}"#,
             r#"{"signed":"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyMTIzIn0.hUl-nngPMY_3h9vveWJUPsCcO5PeL6k9hWLnMYeFbFQ"}"#),
          ex(r#"root = "claims".sign_jwt_hs256("k")"#, "{}", "error:expected object value")],
        sign_hs256),
    method("sign_jwt_hs384", CAT, "Signs an object of claims as an HS384 JWT with the secret.", &[p("signing_secret")],
        &[ex(r#"root.signed = this.claims.sign_jwt_hs384("""dont-tell-anyone""")"#, r#"{"claims":{"sub":"user123"}}"#,
             r#"{"signed":"eyJhbGciOiJIUzM4NCIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyMTIzIn0.zGYLr83aToon1efUNq-hw7XgT20lPvZb8sYei8x6S6mpHwb433SJdXJXx0Oio8AZ"}"#)],
        sign_hs384),
    method("sign_jwt_hs512", CAT, "Signs an object of claims as an HS512 JWT with the secret.", &[p("signing_secret")],
        &[ex(r#"root.signed = this.claims.sign_jwt_hs512("""dont-tell-anyone""")"#, r#"{"claims":{"sub":"user123"}}"#,
             r#"{"signed":"eyJhbGciOiJIUzUxMiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyMTIzIn0.zBNR9o_6EDwXXKkpKLNJhG26j8Dc-mV-YahBwmEdCrmiWt5les8I9rgmNlWIowpq6Yxs4kLNAdFhqoRz3NXT3w"}"#)],
        sign_hs512),
    method("sign_jwt_rs256", CAT, "Signs an object of claims as an RS256 JWT with the RSA private key (PEM).", &[p("signing_secret")],
        &[ex(concat!("root.signed = this.claims.sign_jwt_rs256(\"\"\"", include_str!("testdata/rsa.pem"), "\"\"\")"),
             r#"{"claims":{"sub":"user123"}}"#,
             concat!("{\"signed\":\"", include_str!("testdata/rs256.jwt"), "\"}")),
          round_trip_ex!("rs256", "rsa.pem", "rsa.pub.pem"),
          ex(r#"root = {"a": 1}.sign_jwt_rs256("-----BEGIN RSA PRIVATE KEY-----\nbm90IGEga2V5\n-----END RSA PRIVATE KEY-----")"#, "{}",
             "error:not a valid RSA private key")],
        sign_rs256),
    method("sign_jwt_rs384", CAT, "Signs an object of claims as an RS384 JWT with the RSA private key (PEM).", &[p("signing_secret")],
        &[round_trip_ex!("rs384", "rsa.pem", "rsa.pub.pem")], sign_rs384),
    method("sign_jwt_rs512", CAT, "Signs an object of claims as an RS512 JWT with the RSA private key (PEM).", &[p("signing_secret")],
        &[round_trip_ex!("rs512", "rsa.pem", "rsa.pub.pem")], sign_rs512),
    method("sign_jwt_es256", CAT, "Signs an object of claims as an ES256 JWT with the P-256 private key (PEM). ECDSA signatures are randomised, so each token differs.", &[p("signing_secret")],
        &[round_trip_ex!("es256", "ec_p256.pem", "ec_p256.pub.pem"),
          round_trip_ex!("es256", "ec_p256.pk8.pem", "ec_p256.pub.pem"),
          ex(concat!("root = {\"a\": 1}.sign_jwt_es256(\"\"\"", include_str!("testdata/ec_p384.pem"), "\"\"\")"), "{}",
             "error:not a valid ES256 private key")],
        sign_es256),
    method("sign_jwt_es384", CAT, "Signs an object of claims as an ES384 JWT with the P-384 private key (PEM).", &[p("signing_secret")],
        &[round_trip_ex!("es384", "ec_p384.pem", "ec_p384.pub.pem")], sign_es384),
    method("sign_jwt_es512", CAT, "Signs an object of claims as an ES512 JWT with the P-521 private key (PEM).", &[p("signing_secret")],
        &[round_trip_ex!("es512", "ec_p521.pem", "ec_p521.pub.pem")], sign_es512),
];

macro_rules! jwt_fns {
    ($($parse:ident, $sign:ident => $family:ident $bits:literal;)*) => {$(
        fn $parse<'b>(v: &'b Value, a: &Args<'_>) -> Res<V<'b>> {
            parse_jwt(v, a, Alg(Family::$family, $bits)).map(V::Own)
        }
        fn $sign<'b>(v: &'b Value, a: &Args<'_>) -> Res<V<'b>> {
            sign_jwt(v, a, Alg(Family::$family, $bits)).map(V::Own)
        }
    )*};
}

jwt_fns! {
    parse_hs256, sign_hs256 => Hmac 256;
    parse_hs384, sign_hs384 => Hmac 384;
    parse_hs512, sign_hs512 => Hmac 512;
    parse_rs256, sign_rs256 => Rsa 256;
    parse_rs384, sign_rs384 => Rsa 384;
    parse_rs512, sign_rs512 => Rsa 512;
    parse_es256, sign_es256 => Ecdsa 256;
    parse_es384, sign_es384 => Ecdsa 384;
    parse_es512, sign_es512 => Ecdsa 512;
}

/// The DER bytes of the first PEM block in `text`. Encrypted keys are refused.
fn pem_der(text: &str) -> Res<Vec<u8>> {
    let start = text
        .find("-----BEGIN ")
        .ok_or("no PEM block (-----BEGIN ...-----) in the key")?;
    let body = &text[start..];
    let header_end = body[11..]
        .find("-----")
        .map(|i| i + 16)
        .ok_or("unterminated PEM header")?;
    let end = body
        .find("-----END ")
        .ok_or("no PEM end line (-----END ...-----) in the key")?;
    if end < header_end {
        return Err("malformed PEM block".into());
    }
    let inner = &body[header_end..end];
    if inner.contains("Proc-Type:") || inner.contains("ENCRYPTED") {
        return Err("encrypted PEM keys are not supported".into());
    }
    let b64: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD
        .decode(b64)
        .map_err(|e| format!("PEM block is not valid base64: {e}"))
}

fn hmac_sign(bits: u16, key: &[u8], data: &[u8]) -> Res<Vec<u8>> {
    match bits {
        256 => hmac_of::<Hmac<sha2::Sha256>>(key, data),
        384 => hmac_of::<Hmac<sha2::Sha384>>(key, data),
        _ => hmac_of::<Hmac<sha2::Sha512>>(key, data),
    }
}

fn rsa_signing(bits: u16) -> &'static signature::RsaSignatureEncoding {
    match bits {
        256 => &signature::RSA_PKCS1_SHA256,
        384 => &signature::RSA_PKCS1_SHA384,
        _ => &signature::RSA_PKCS1_SHA512,
    }
}

fn ecdsa_signing(bits: u16) -> &'static signature::EcdsaSigningAlgorithm {
    // JWTs carry ECDSA signatures as fixed-width r || s, not DER.
    match bits {
        256 => &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        384 => &signature::ECDSA_P384_SHA384_FIXED_SIGNING,
        _ => &signature::ECDSA_P521_SHA512_FIXED_SIGNING,
    }
}

fn verification(alg: Alg) -> &'static dyn signature::VerificationAlgorithm {
    match alg {
        Alg(Family::Rsa, 256) => &signature::RSA_PKCS1_2048_8192_SHA256,
        Alg(Family::Rsa, 384) => &signature::RSA_PKCS1_2048_8192_SHA384,
        Alg(Family::Rsa, _) => &signature::RSA_PKCS1_2048_8192_SHA512,
        Alg(_, 256) => &signature::ECDSA_P256_SHA256_FIXED,
        Alg(_, 384) => &signature::ECDSA_P384_SHA384_FIXED,
        Alg(_, _) => &signature::ECDSA_P521_SHA512_FIXED,
    }
}

/// Parsed keys, as the key is nearly always a literal and parsing (RSA especially) costs
/// far more than signing a small token. Keyed by algorithm too, since the curve or hash
/// is fixed at parse time. Failed parses are not kept, so they error every time.
static RSA_PRIVATE: Memo<RsaKeyPair> = Memo::new();
static EC_PRIVATE: Memo<EcdsaKeyPair> = Memo::new();
static PUBLIC: Memo<signature::ParsedPublicKey> = Memo::new();

/// The memo key: the algorithm name, a space (never in a name) and the key text as the
/// parse reads it.
fn memo_key(alg: Alg, key: &[u8]) -> String {
    format!("{} {}", alg.name(), String::from_utf8_lossy(key))
}

fn sign_bytes(alg: Alg, key: &[u8], data: &[u8]) -> Res<Vec<u8>> {
    let rng = aws_lc_rs::rand::SystemRandom::new();
    match alg.0 {
        Family::Hmac => hmac_sign(alg.1, key, data),
        Family::Rsa => {
            let pair = RSA_PRIVATE.get(&memo_key(alg, key), || {
                let der = pem_der(&String::from_utf8_lossy(key))?;
                RsaKeyPair::from_der(&der)
                    .or_else(|_| RsaKeyPair::from_pkcs8(&der))
                    .map_err(|e| format!("not a valid RSA private key: {e}"))
            })?;
            let mut sig = vec![0; pair.public_modulus_len()];
            pair.sign(rsa_signing(alg.1), &rng, data, &mut sig)
                .map_err(|_| "RSA signing failed".to_string())?;
            Ok(sig)
        }
        Family::Ecdsa => {
            let pair = EC_PRIVATE.get(&memo_key(alg, key), || {
                let der = pem_der(&String::from_utf8_lossy(key))?;
                EcdsaKeyPair::from_private_key_der(ecdsa_signing(alg.1), &der)
                    .map_err(|e| format!("not a valid {} private key: {e}", alg.name()))
            })?;
            pair.sign(&rng, data)
                .map(|s| s.as_ref().to_vec())
                .map_err(|_| "ECDSA signing failed".to_string())
        }
    }
}

fn verify_bytes(alg: Alg, key: &[u8], data: &[u8], sig: &[u8]) -> Res<()> {
    const MISMATCH: &str = "JWT signature does not match";
    match alg.0 {
        Family::Hmac => {
            // Compared in constant time so the check does not leak how much matched.
            let want = hmac_sign(alg.1, key, data)?;
            let same = want.len() == sig.len()
                && want.iter().zip(sig).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
            same.then_some(()).ok_or_else(|| MISMATCH.to_string())
        }
        Family::Rsa | Family::Ecdsa => {
            let public = PUBLIC.get(&memo_key(alg, key), || {
                let der = pem_der(&String::from_utf8_lossy(key))?;
                // A key of the wrong kind or curve is reported as such, not as a bad signature.
                signature::ParsedPublicKey::new(verification(alg), &der)
                    .map_err(|e| format!("not a valid {} public key: {e}", alg.name()))
            })?;
            public
                .verify_sig(data, sig)
                .map_err(|_| MISMATCH.to_string())
        }
    }
}

fn parse_jwt(v: &Value, args: &Args<'_>, alg: Alg) -> Res<Value> {
    let token = text(v)?;
    let parts: Vec<&str> = token.split('.').collect();
    let [head, body, sig] = parts[..] else {
        return Err("a JWT has three dot-separated parts".into());
    };
    let header = Value::from_json(
        &URL_SAFE_NO_PAD
            .decode(head)
            .map_err(|e| format!("bad JWT header: {e}"))?,
    )
    .map_err(|e| format!("bad JWT header: {e}"))?;
    let name = alg.name();
    match crate::mapping::exec::field(&header, "alg").as_str() {
        Some(a) if a == name => {}
        Some(a) => return Err(format!("JWT is signed with {a}, not {name}")),
        None => return Err("JWT header has no alg".into()),
    }
    let sig = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|e| format!("bad JWT signature: {e}"))?;
    verify_bytes(
        alg,
        &raw(args.get(0))?,
        // The token split into exactly three parts, so this is `head.body` as it came.
        token[..head.len() + 1 + body.len()].as_bytes(),
        &sig,
    )?;
    Value::from_json(
        &URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|e| format!("bad JWT claims: {e}"))?,
    )
    .map_err(|e| format!("bad JWT claims: {e}"))
}

fn sign_jwt(v: &Value, args: &Args<'_>, alg: Alg) -> Res<Value> {
    super::object(v)?;
    let head = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"{}","typ":"JWT"}}"#, alg.name()));
    let body = URL_SAFE_NO_PAD.encode(v.to_json());
    let input = format!("{head}.{body}");
    let sig = URL_SAFE_NO_PAD.encode(sign_bytes(alg, &raw(args.get(0))?, input.as_bytes())?);
    Ok(Value::String(format!("{input}.{sig}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_public_key_is_read() {
        assert!(!pem_der(rs_pub!()).unwrap().is_empty());
    }

    #[test]
    fn malformed_keys_and_tokens_are_errors_not_panics() {
        for key in [
            "",
            "-----BEGIN ",
            "-----BEGIN X-----",
            "-----END X----- -----BEGIN X-----",
            "-----BEGIN X-----\n!!!\n-----END X-----",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n-----END RSA PRIVATE KEY-----",
        ] {
            for family in [Family::Rsa, Family::Ecdsa] {
                assert!(sign_bytes(Alg(family, 256), key.as_bytes(), b"x").is_err());
                assert!(verify_bytes(Alg(family, 256), key.as_bytes(), b"x", b"y").is_err());
            }
        }
        let public = include_str!("testdata/ec_p256.pub.pem").as_bytes();
        let err = verify_bytes(Alg(Family::Ecdsa, 256), public, b"x", b"not a signature");
        assert_eq!(err.unwrap_err(), "JWT signature does not match");
        let err = verify_bytes(Alg(Family::Ecdsa, 384), public, b"x", b"sig");
        assert!(err.unwrap_err().contains("not a valid ES384 public key"));
    }
}
