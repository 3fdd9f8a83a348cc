//! Prints the EtcdMirror CRD: `cargo run -p tidemark-api --example crd > deploy/crd.yaml`.

fn main() {
    print!("{}", tidemark_api::crd_yaml());
}
