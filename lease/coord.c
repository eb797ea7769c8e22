/* SPDX-License-Identifier: MIT */
/* Coordinator (placeholder until implemented). */
#include "coord.h"
