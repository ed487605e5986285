//! The `mechlab` command line (the commands land with the report renderer).
fn main() {
    eprintln!("mechlab: the command line is not wired yet");
    std::process::exit(2);
}
