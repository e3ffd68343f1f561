"""`python -m loadgen.emulator ...`: start one emulated SGLang server."""

from loadgen.emulator.main import main

if __name__ == "__main__":
    main()
