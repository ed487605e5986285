//! The `mechlab` binary: the command line with the built-in papers.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    mechlab::cli::main(mechlab::papers::registry())
}
