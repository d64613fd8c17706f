/* commands.h — one entry point per `kvdrift` subcommand; each lives in harness/cmd_<name>.c.
 * A command returns the process exit code: 0 pass, 1 regression found, 2 usage/input error. */
#ifndef KVD_COMMANDS_H
#define KVD_COMMANDS_H

int cmd_run(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_ref(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bless(int argc, char **argv);
int cmd_judge(int argc, char **argv);
int cmd_adapter(int argc, char **argv);
/* `kvdrift sweep MODEL --engine ADAPTER ...` (cmd_sweep_engine.c; cmd_sweep hands it over). */
int cmd_sweep_engine(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_probe(int argc, char **argv);

#endif
