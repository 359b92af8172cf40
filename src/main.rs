fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info,raft=warn"))
        .init();
    std::process::exit(rill::cli::main());
}
