/* main.c — `ragtag`: the only place that decides to exit. */
#include "cli.h"

int main(int argc, char **argv) { return rt_cli_main(argc, argv); }
