# Short names for the common commands; each is a thin wrapper so that `cargo xtask` stays the one source.

# Build everything, import the corpus as demo archives, serve the host with the web viewer
demo addr="127.0.0.1:8080":
    cargo xtask demo --addr {{addr}}

# Install what the tests need and run every test
test *args:
    cargo xtask test {{args}}

# Build the wasm viewer into web/pkg
wasm:
    cargo xtask wasm --release

# Fuzz the archive reader (needs cargo-fuzz and a nightly toolchain)
fuzz secs="600":
    cargo +nightly fuzz run archive_open -- -max_total_time={{secs}}

# Fuzz planning and CPU replay of archives whose checksums are resealed (needs cargo-fuzz and a nightly toolchain)
fuzz-replay secs="600":
    mkdir -p fuzz/corpus/archive_replay
    cargo +nightly fuzz run archive_replay fuzz/corpus/archive_replay fuzz/seeds/archive_replay -- -max_total_time={{secs}}

# Fuzz the reader of NVIDIA Warp captures behind `recap import-wrp` (needs cargo-fuzz and a nightly toolchain)
fuzz-wrp secs="600":
    mkdir -p fuzz/corpus/wrp_parse
    cargo +nightly fuzz run wrp_parse fuzz/corpus/wrp_parse fuzz/seeds/wrp_parse -- -max_total_time={{secs}}

# Fuzz the unpacking of Warp capture bundles (zip, tar, tar.gz) the host converts on upload (needs cargo-fuzz and a nightly toolchain)
fuzz-bundle secs="600":
    mkdir -p fuzz/corpus/bundle_unpack
    cargo +nightly fuzz run bundle_unpack fuzz/corpus/bundle_unpack fuzz/seeds/bundle_unpack -- -max_total_time={{secs}}

# Fuzz the .npy reader that `replay --input` uses (needs cargo-fuzz and a nightly toolchain)
fuzz-npy secs="600":
    mkdir -p fuzz/corpus/npy_parse
    cargo +nightly fuzz run npy_parse fuzz/corpus/npy_parse fuzz/seeds/npy_parse -- -max_total_time={{secs}}

# Stage release binaries, test executables and the corpus in .gpu/ for an H100/H200 machine
gpu-pack:
    ../shared/tools/gpu-pack
