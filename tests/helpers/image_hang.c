// Waits for good in a function of a known name: a program that only a test
// image holds (tests/integration/container_test.cpp, the stacks of ranks in
// a container). Static, with symbols, so that it runs in an image without a
// C library and a stack tool can name its frames.
#include <unistd.h>

__attribute__((noinline)) void dlaunch_image_only_wait(void) {
  for (;;) pause();
}

int main(void) {
  dlaunch_image_only_wait();
  return 0;
}
