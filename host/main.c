/* main.c — the ctrain command line: dispatches subcommands. (placeholder until the CLI lands) */
#include <stdio.h>
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "ctrain: no commands yet\n");
    return 2;
}
