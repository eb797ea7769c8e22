/* SPDX-License-Identifier: MIT */
/* Daemon (placeholder until implemented). */
#include <stdio.h>
int main(void) { fputs("leasefs: not built yet\n", stderr); return 1; }
