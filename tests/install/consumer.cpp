// consumer.cpp - the public header from C++, linked statically.
#include <sharc.h>
#include <sharc_shard.h>

#include <cstdio>
#include <vector>

int main() {
  sharc_comm_t comm = nullptr;
  if (sharc_comm_init_env(&comm) != SHARC_OK) {
    std::fprintf(stderr, "init: %s\n", sharc_last_error());
    return 1;
  }
  int rank = 0, size = 0;
  sharc_comm_rank(comm, &rank);
  sharc_comm_size(comm, &size);
  std::vector<int> all(static_cast<size_t>(size));
  sharc_status_t st =
      sharc_all_gather(&rank, all.data(), 1, SHARC_I32, comm, nullptr);
  bool ok = st == SHARC_OK;
  for (int i = 0; i < size; i++)
    ok = ok && all[static_cast<size_t>(i)] == i;
  std::printf("consumer_cxx rank %d: %s\n", rank, ok ? "ok" : "WRONG");
  sharc_comm_destroy(comm);
  return ok ? 0 : 1;
}
