/* A plain TCP stream between two hosts, the yardstick for cc's tcp transport: one socket,
 * blocking send/recv of BYTES in 4 MiB writes, default socket options plus TCP_NODELAY.
 *   tcp-stream server PORT BYTES        (prints GB/s when done)
 *   tcp-stream client HOST PORT BYTES
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const size_t chunk = 4u << 20;
  char* buffer = calloc(1, chunk);
  if (argc == 4 && strcmp(argv[1], "server") == 0) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)atoi(argv[2]));
    if (bind(listener, (struct sockaddr*)&address, sizeof(address)) != 0 || listen(listener, 1) != 0) {
      perror("bind/listen");
      return 1;
    }
    int fd = accept(listener, NULL, NULL);
    size_t total = strtoull(argv[3], NULL, 10), received = 0;
    double start = 0;
    while (received < total) {
      ssize_t n = recv(fd, buffer, chunk, 0);
      if (n <= 0) {
        perror("recv");
        return 1;
      }
      if (received == 0) start = now();
      received += (size_t)n;
    }
    double seconds = now() - start;
    send(fd, "k", 1, 0);
    printf("tcp-stream %zu bytes %.3f s %.3f GB/s\n", total, seconds, (double)total / seconds / 1e9);
    return 0;
  }
  if (argc == 5 && strcmp(argv[1], "client") == 0) {
    struct addrinfo hints = {0}, *result = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(argv[2], argv[3], &hints, &result) != 0) return 1;
    int fd = -1;
    for (int attempt = 0; attempt < 200; ++attempt) {
      fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, result->ai_addr, result->ai_addrlen) == 0) break;
      close(fd);
      fd = -1;
      usleep(20000);
    }
    if (fd < 0) {
      perror("connect");
      return 1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    size_t total = strtoull(argv[4], NULL, 10), sent = 0;
    while (sent < total) {
      size_t want = total - sent < chunk ? total - sent : chunk;
      ssize_t n = send(fd, buffer, want, 0);
      if (n <= 0) {
        perror("send");
        return 1;
      }
      sent += (size_t)n;
    }
    char ack;
    recv(fd, &ack, 1, 0);
    return 0;
  }
  fprintf(stderr, "usage: tcp-stream server PORT BYTES | client HOST PORT BYTES\n");
  return 2;
}
