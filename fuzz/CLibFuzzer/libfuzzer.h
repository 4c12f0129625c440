#ifndef CLIBFUZZER_H
#define CLIBFUZZER_H

#include <stddef.h>
#include <stdint.h>

/// libFuzzer's driver for a program with a `main` of its own (LLVM 11 and later): parses libFuzzer's
/// flags in argv and runs `callback` on every input. Defined by the runtime that
/// `-sanitize=fuzzer` links; declared, not called, in a build without it.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif
