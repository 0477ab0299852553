//! A test cluster's certificates: a CA and, for each name, a
//! certificate for serving and for client authentication, made with
//! openssl(1) (installed by scripts/test; a missing one fails the test).

use std::path::Path;
use std::process::Command;

fn openssl(args: &[&str], dir: &Path) {
    let st = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("openssl(1) is installed by scripts/test");
    assert!(st.success(), "openssl {args:?}");
}

/// A CA in `dir` (`ca.pem`, `ca.key`) and, for each name, `NAME.pem` and
/// `NAME.key` signed by it, for serving and for client authentication,
/// with the name and 127.0.0.1 as subjectAltNames.
pub fn pki(dir: &Path, names: &[&str]) {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=Test cluster CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
        dir,
    );
    for n in names {
        openssl(
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN={n}"),
                "-keyout",
                &format!("{n}.key"),
                "-out",
                &format!("{n}.csr"),
            ],
            dir,
        );
        std::fs::write(
            dir.join(format!("{n}.ext")),
            format!(
                "subjectAltName=DNS:{n},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )
        .unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &format!("{n}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{n}.ext"),
                "-out",
                &format!("{n}.pem"),
            ],
            dir,
        );
    }
}
