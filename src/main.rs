fn main() -> std::process::ExitCode {
    edi_inbox::main()
}
