# comm mpi: Open MPI from Debian (libopenmpi-dev); the host never links MPI, only this plugin.
comm_mpi_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
comm_mpi_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)
