/* SPDX-License-Identifier: MIT */
/* placeholder until implemented */
#include "fs.h"
