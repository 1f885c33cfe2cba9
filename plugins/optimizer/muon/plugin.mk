# optimizer muon: Newton–Schulz's matrix products through OpenBLAS (the gpt model's library).
optimizer_muon_CFLAGS := $(BLAS_CFLAGS)
optimizer_muon_LIBS   := $(BLAS_LIBS)
