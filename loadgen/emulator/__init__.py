"""SGLang-compatible emulator with a speculative-decoding cost model (`python -m loadgen.emulator --help`).

Everything it reports is a model, labelled `"emulated": true` in /get_server_info; see README.md here.
"""
