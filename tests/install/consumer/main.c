/* Makes a one-rank communicator and exchanges a value with itself. */
#include <cc/cc.h>
#include <stdio.h>

int main(void) {
  ccUniqueId id;
  ccComm_t comm;
  int out = 42, in = 0, version = 0;
  if (ccGetVersion(&version) != ccSuccess || ccGetUniqueId(&id) != ccSuccess ||
      ccCommInitRank(&comm, 1, id, 0) != ccSuccess) {
    fprintf(stderr, "init failed: %s\n", ccGetLastError(NULL));
    return 1;
  }
  ccGroupStart();
  ccSend(&out, 1, ccInt32, 0, comm, NULL);
  ccRecv(&in, 1, ccInt32, 0, comm, NULL);
  if (ccGroupEnd() != ccSuccess || in != 42) return 1;
  ccCommDestroy(comm);
  printf("consumer: cc %d works\n", version);
  return 0;
}
