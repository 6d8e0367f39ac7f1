// The translation unit that compiles the shared precompiled header (see MLXRT_PCH).
