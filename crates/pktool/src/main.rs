//! pktool: key and certificate management for PKCS#11 tokens.
//!
//! Exit codes: 0 ok, 2 usage, 3 token/PKCS#11 error, 4 file/IO error, 5 object not found,
//! 6 ambiguous name, 7 wrong PIN, 8 locked PIN, 9 wrong file password, 10 label taken
//! (docs/PKTOOL.md).
#![forbid(unsafe_code)]

mod cmd;
mod error;
mod import;
mod keys;
mod migrate;
mod objects;
mod pin;
mod token;
mod uri;
mod util;
mod x509;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "pktool",
    version,
    about = "Manage keys and certificates in PKCS#11 tokens (OpenCF by default)",
    after_help = "Exit codes: 0 ok, 2 usage error, 3 token/PKCS#11 error, 4 file/IO error, \
                  5 object not found, 6 ambiguous name, 7 wrong PIN, 8 locked PIN, \
                  9 wrong file password, 10 label already used by an object of that class."
)]
pub struct Cli {
    /// PKCS#11 module (default: libopencf.so beside pktool, else in ../lib, else in $OPENCF_LIB_DIR)
    #[arg(long, global = true, value_name = "PATH")]
    pub module: Option<PathBuf>,
    /// Token by label
    #[arg(long, global = true, value_name = "LABEL", conflicts_with = "slot")]
    pub token: Option<String>,
    /// Token by slot ID (default: the first slot, slot 0, the OpenCF metaslot)
    #[arg(long, global = true, value_name = "ID")]
    pub slot: Option<u64>,
    #[command(flatten)]
    pub pin: PinArgs,
    /// Machine-readable output
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Args, Debug, Clone, Default)]
pub struct PinArgs {
    /// Read the PIN from the first line of FILE
    #[arg(long, global = true, value_name = "FILE")]
    pub pin_file: Option<PathBuf>,
    /// Read the PIN from environment variable VAR
    #[arg(long, global = true, value_name = "VAR")]
    pub pin_env: Option<String>,
    /// The PIN itself (unsafe: other users can see it in the process list)
    #[arg(long, global = true, value_name = "PIN")]
    pub pin: Option<String>,
}

impl PinArgs {
    pub fn source(&self) -> pin::SecretSource {
        pin::SecretSource {
            file: self.pin_file.clone(),
            env: self.pin_env.clone(),
            value: self.pin.clone(),
            options: pin::PIN_OPTIONS,
        }
    }
}

/// Names an existing object.
#[derive(Args, Debug, Clone, Default)]
pub struct ObjArgs {
    /// PKCS#11 URI (RFC 7512), e.g. 'pkcs11:object=web;type=private'
    #[arg(long)]
    pub uri: Option<String>,
    /// CKA_LABEL
    #[arg(long)]
    pub label: Option<String>,
    /// CKA_ID in hex
    #[arg(long)]
    pub id: Option<String>,
    /// Object class: private, public, cert, secret-key, data
    #[arg(long = "type", value_name = "TYPE")]
    pub kind: Option<String>,
}

/// Attributes of a new key.
#[derive(Args, Debug, Clone, Default)]
pub struct NewKeyArgs {
    /// CKA_LABEL of the new object(s)
    #[arg(long)]
    pub label: Option<String>,
    /// CKA_ID in hex (default for key pairs: SHA-1 of the public value)
    #[arg(long)]
    pub id: Option<String>,
    /// CKA_SENSITIVE of the private or secret key [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub sensitive: Option<bool>,
    /// CKA_EXTRACTABLE of the private or secret key [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub extractable: Option<bool>,
    #[command(flatten)]
    pub labels: LabelArgs,
}

/// Whether a new object may take a label already used.
#[derive(Args, Debug, Clone, Default)]
pub struct LabelArgs {
    /// Store the new object(s) even when an object of the same class already has the label
    /// (the label then names several objects)
    #[arg(long)]
    pub allow_duplicate_label: bool,
}

/// A password for a PKCS#12 or encrypted PKCS#8 file.
#[derive(Args, Debug, Clone, Default)]
pub struct P12PassArgs {
    /// Read the file password from the first line of FILE
    #[arg(long, value_name = "FILE")]
    pub p12_pass_file: Option<PathBuf>,
    /// Read the file password from environment variable VAR
    #[arg(long, value_name = "VAR")]
    pub p12_pass_env: Option<String>,
}

impl P12PassArgs {
    pub fn source(&self) -> pin::SecretSource {
        pin::SecretSource {
            file: self.p12_pass_file.clone(),
            env: self.p12_pass_env.clone(),
            value: None,
            options: pin::FILE_PASS_OPTIONS,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// List slots and tokens, with their flags and PIN state
    Tokens,
    /// Initialize the token in --slot: label and SO PIN (the global PIN options give the SO PIN)
    Inittoken {
        /// Label of the new token
        #[arg(long, value_name = "LABEL")]
        label: String,
        /// Also set the user PIN from the first line of FILE
        #[arg(long, value_name = "FILE")]
        user_pin_file: Option<PathBuf>,
    },
    /// Change the user PIN (or with --so the SO PIN); the global PIN options give the old PIN
    Setpin {
        /// Change the SO PIN
        #[arg(long)]
        so: bool,
        /// Read the new PIN from the first line of FILE
        #[arg(long, value_name = "FILE")]
        new_pin_file: Option<PathBuf>,
        /// Read the new PIN from environment variable VAR
        #[arg(long, value_name = "VAR")]
        new_pin_env: Option<String>,
        /// The new PIN itself (unsafe)
        #[arg(long, value_name = "PIN")]
        new_pin: Option<String>,
    },
    /// Generate a secret key: aes, generic, des3, chacha20
    Genkey {
        #[arg(long, default_value = "aes")]
        keytype: String,
        /// Key size in bits (AES 128/192/256, generic 8..4096)
        #[arg(long)]
        size: Option<u64>,
        #[command(flatten)]
        new: NewKeyArgs,
    },
    /// Generate a key pair: rsa, ec, ed25519, ed448, x25519, x448, ml-dsa-44/65/87, ml-kem-512/768/1024
    Genkeypair {
        #[arg(long, default_value = "rsa")]
        keytype: String,
        /// RSA modulus size in bits [default: 2048]
        #[arg(long)]
        size: Option<u64>,
        /// EC curve: P-256, P-384, P-521 [default: P-256]
        #[arg(long)]
        curve: Option<String>,
        #[command(flatten)]
        new: NewKeyArgs,
    },
    /// List objects with their attributes
    List {
        /// keys, private, public, secret-key, cert or all
        #[arg(long = "objtype", default_value = "all")]
        objtype: String,
        #[command(flatten)]
        obj: ObjArgs,
        /// Also show CKA_VALUE of secret keys that are not sensitive
        #[arg(long)]
        values: bool,
    },
    /// Delete the objects that match
    Delete {
        #[command(flatten)]
        obj: ObjArgs,
        /// Do not ask for confirmation
        #[arg(short = 'y', long)]
        yes: bool,
    },
    /// Import the keys and certificates of a PEM file, a DER key or certificate, or a PKCS#12 file
    Import {
        /// The file to import
        #[arg(long, short = 'i', value_name = "FILE")]
        input: PathBuf,
        #[command(flatten)]
        new: NewKeyArgs,
        #[command(flatten)]
        pass: P12PassArgs,
    },
    /// Export a certificate, public key or (when the token allows) a private key
    Export {
        #[command(flatten)]
        obj: ObjArgs,
        /// Output file ('-' for stdout)
        #[arg(long, short = 'o', value_name = "FILE", default_value = "-")]
        output: PathBuf,
        /// pem, der, pkcs8 (PEM PKCS#8 of a private key) or pkcs12
        #[arg(long, default_value = "pem")]
        format: String,
        #[command(flatten)]
        pass: P12PassArgs,
    },
    /// Make a PKCS#10 request signed by a token private key
    Gencsr {
        #[command(flatten)]
        obj: ObjArgs,
        /// Subject, e.g. "CN=www.example.com,O=Example"
        #[arg(long)]
        subject: String,
        /// Subject alternative names, e.g. "DNS:www.example.com,IP:192.0.2.1,email:a@b.c"
        #[arg(long)]
        san: Option<String>,
        #[arg(long, short = 'o', value_name = "FILE", default_value = "-")]
        output: PathBuf,
        /// pem or der
        #[arg(long, default_value = "pem")]
        format: String,
    },
    /// Make a self-signed certificate from a token key and store it with the key's CKA_ID
    Gencert {
        #[command(flatten)]
        obj: ObjArgs,
        #[arg(long)]
        subject: String,
        #[arg(long)]
        san: Option<String>,
        /// Validity in days
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Serial number in hex [default: random]
        #[arg(long)]
        serial: Option<String>,
        /// Make a CA certificate (basicConstraints CA:TRUE, keyCertSign)
        #[arg(long)]
        ca: bool,
        /// Label of the stored certificate [default: the key's label]
        #[arg(long)]
        cert_label: Option<String>,
        /// Do not store the certificate in the token
        #[arg(long)]
        no_store: bool,
        #[command(flatten)]
        labels: LabelArgs,
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
        #[arg(long, default_value = "pem")]
        format: String,
    },
    /// Issue a certificate for a PKCS#10 request with a CA key held in the token
    Signcsr {
        #[command(flatten)]
        obj: ObjArgs,
        /// The request (PEM or DER)
        #[arg(long, value_name = "FILE")]
        csr: PathBuf,
        /// The CA certificate [default: the token certificate with the CA key's CKA_ID]
        #[arg(long, value_name = "FILE")]
        ca_cert: Option<PathBuf>,
        #[arg(long, default_value_t = 365)]
        days: u32,
        #[arg(long)]
        serial: Option<String>,
        /// Issue a CA certificate
        #[arg(long)]
        ca: bool,
        #[arg(long, short = 'o', value_name = "FILE", default_value = "-")]
        output: PathBuf,
        #[arg(long, default_value = "pem")]
        format: String,
    },
    /// Copy every object it may from another PKCS#11 module's token into this token
    Migrate(migrate::MigrateArgs),
}

/// Whether the command line asks for `--json` (looked for by hand when it cannot be parsed).
fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // A usage error clap finds is still reported as JSON on stdout when --json is
            // given, as every other failure is; help and version are not errors.
            if e.use_stderr() && json_asked() {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or("usage error");
                let msg = first.strip_prefix("error: ").unwrap_or(first);
                let v = serde_json::json!({"error": msg, "ckr": null, "exit": error::EXIT_USAGE});
                println!("{v}");
            }
            e.exit()
        }
    };
    let code = match cmd::run(&cli) {
        Ok(()) => 0,
        Err(e) => {
            if cli.json && !matches!(e, error::Error::Reported(_)) {
                let v = serde_json::json!({"error": e.to_string(), "ckr": e.ckr(), "exit": e.exit_code()});
                println!("{v}");
            }
            eprintln!("pktool: error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
