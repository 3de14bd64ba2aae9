// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/stream_window.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "common/buffer_pool.h"
#include "common/byte_queue.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;

TEST_CASE("receive window: bytes in, delivered, granted back keeps the invariant") {
  ReceiveWindow w(1000);
  REQUIRE(w.on_receive(600));
  CHECK(w.remaining() == 400);
  CHECK(w.buffered() == 600);
  w.on_delivered(100);
  CHECK(w.take_grant() == 0);  // below a quarter of the window: no update yet
  w.on_delivered(200);
  CHECK(w.take_grant() == 300);
  CHECK(w.remaining() == 700);
  CHECK(w.buffered() == 300);
  CHECK(w.remaining() + w.buffered() + w.pending_grant() == w.size());
}

TEST_CASE("receive window: a sender overrunning the window is detected") {
  ReceiveWindow w(1000);
  REQUIRE(w.on_receive(1000));
  CHECK_FALSE(w.on_receive(1));
}

TEST_CASE("send credit: take, refund, and grants bounded by the peer's window") {
  SendCredit c(1000);
  CHECK(c.take(300) == 300);
  CHECK(c.take(800) == 700);
  CHECK(c.take(1) == 0);
  c.refund(200);
  CHECK(c.available() == 200);
  CHECK(c.grant(800, 1000));
  CHECK(c.available() == 1000);
  CHECK_FALSE(c.grant(1, 1000));  // more than the window can hold: broken peer
  CHECK_FALSE(c.grant(0, 1000));  // zero increments are meaningless
}

TEST_CASE("sender and receiver agree: the sender never exceeds what the receiver allows") {
  ReceiveWindow rx(64 * 1024);
  SendCredit tx(64 * 1024);
  uint64_t sent = 0, delivered = 0;
  for (int round = 0; round < 1000; ++round) {
    uint64_t n = tx.take(5000 + static_cast<uint64_t>(round % 7) * 1000);
    REQUIRE(rx.on_receive(n));
    sent += n;
    uint64_t d = rx.buffered() / 2 + 1;
    if (d > rx.buffered()) d = rx.buffered();
    rx.on_delivered(d);
    delivered += d;
    if (uint64_t g = rx.take_grant()) REQUIRE(tx.grant(g, 64 * 1024));
  }
  CHECK(sent > 1000000);
  CHECK(sent - delivered == rx.buffered());
}

TEST_CASE("byte queue: adopt, append into the tail, gather and consume") {
  BufferPool pool(64, 8);
  ByteQueue q(&pool);
  uint8_t* b = pool.acquire();
  std::memcpy(b + 10, "0123456789", 10);
  q.adopt(b, 10, 20);
  REQUIRE(q.append("abcdefghij", 10));  // fits after the adopted bytes
  CHECK(pool.in_use() == 1);
  iovec iov[4];
  REQUIRE(q.front_iovecs(iov, 4) == 1);
  CHECK(std::string(static_cast<char*>(iov[0].iov_base), iov[0].iov_len) == "0123456789abcdefghij");
  q.consume(15);
  REQUIRE(q.front_iovecs(iov, 4) == 1);
  CHECK(std::string(static_cast<char*>(iov[0].iov_base), iov[0].iov_len) == "fghij");
  q.consume(5);
  CHECK(q.empty());
}

TEST_CASE("byte queue: a failed append leaves the queue unchanged") {
  BufferPool pool(64, 2);
  ByteQueue q(&pool);
  std::string big(200, 'x');
  CHECK_FALSE(q.append(big.data(), big.size()));
  CHECK(q.empty());
  CHECK(pool.in_use() == 0);
  REQUIRE(q.append(big.data(), 100));
  CHECK(q.size() == 100);
  CHECK(pool.in_use() == 2);
  q.clear();
  CHECK(pool.in_use() == 0);
}

TEST_CASE("byte queue: a stream's queue gives its last buffer back once empty; a session's keeps it") {
  BufferPool pool(64, 4);
  ByteQueue stream_queue(&pool, /*keep_last_buffer=*/false);
  REQUIRE(stream_queue.append("hello", 5));
  CHECK(pool.in_use() == 1);
  stream_queue.consume(5);
  CHECK(stream_queue.empty());
  CHECK(pool.in_use() == 0);  // an idle stream holds no buffer
  ByteQueue session_queue(&pool);
  REQUIRE(session_queue.append("hello", 5));
  session_queue.consume(5);
  CHECK(pool.in_use() == 1);  // kept for the next small frames
  REQUIRE(session_queue.append("again", 5));
  CHECK(pool.in_use() == 1);
}

TEST_CASE("byte queue: many segments in and out keep their order (front pops and compaction)") {
  BufferPool pool(64, 256);
  ByteQueue q(&pool, false);
  std::string in, out;
  uint32_t next = 0;
  // Append 3 segments' worth, consume 2, over and over: the front index
  // runs ahead and the list compacts behind it.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3 * 64; ++i, ++next) {
      char c = static_cast<char>('a' + next % 26);
      in += c;
      REQUIRE(q.append(&c, 1));
    }
    size_t take = std::min<size_t>(q.size(), 2 * 64 + static_cast<size_t>(round % 7));
    while (take > 0) {
      iovec iov[4];
      int n = q.front_iovecs(iov, 4);
      REQUIRE(n > 0);
      size_t len = std::min(take, iov[0].iov_len);
      out.append(static_cast<char*>(iov[0].iov_base), len);
      q.consume(len);
      take -= len;
    }
  }
  while (!q.empty()) {
    iovec iov[1];
    REQUIRE(q.front_iovecs(iov, 1) == 1);
    out.append(static_cast<char*>(iov[0].iov_base), iov[0].iov_len);
    q.consume(iov[0].iov_len);
  }
  CHECK(out == in);
  CHECK(pool.in_use() == 0);
}

TEST_CASE("buffer pool: a trimmable pool gives back the pages of buffers unused since the last trim") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  BufferPool pool(page + 512, 32, /*trimmable=*/true);
  REQUIRE(pool.buffer_size() == 2 * page);  // page-aligned: each buffer owns its pages
  auto resident = [&] { return BufferPool::resident_bytes(pool.base(), pool.slab_bytes()) / page; };
  std::vector<uint8_t*> bufs;
  for (int i = 0; i < 32; ++i) {
    bufs.push_back(pool.acquire());
    std::memset(bufs.back(), 0xab, pool.buffer_size());
  }
  CHECK(resident() == 64);
  for (uint8_t* b : bufs) pool.release(b);
  CHECK(pool.trim(4) == 0);  // they were in use since the last trim: none is given back yet
  CHECK(resident() == 64);
  uint8_t* hot = pool.acquire();  // used again meanwhile: one of the 4 kept
  pool.release(hot);
  CHECK(pool.trim(4) == 27);  // 31 stayed free the whole time, the 4 used last are kept
  CHECK(resident() == 10);
  CHECK(pool.trim(4) == 1);  // the 28th was one of the 4 kept last time, and stayed free since
  CHECK(resident() == 8);
  CHECK(pool.trim(4) == 0);  // nothing twice
  // A given-back buffer comes back zeroed, and works.
  std::vector<uint8_t*> again;
  for (int i = 0; i < 32; ++i) again.push_back(pool.acquire());
  CHECK(again.back() == bufs[0]);  // the bottom of the free list: given back
  CHECK(again.back()[0] == 0);
  again.back()[0] = 1;
  for (uint8_t* b : again) pool.release(b);

  // Buffers are handed out in address order: the extent is the prefix used.
  BufferPool fresh(page, 64, /*trimmable=*/true);
  uint8_t* first = fresh.acquire();
  fresh.acquire();
  fresh.release(first);
  CHECK(fresh.residency_extent() == 2 * page);
  CHECK(fresh.acquire() == first);  // reused: the extent stays
  CHECK(fresh.residency_extent() == 2 * page);

  BufferPool registered(page + 512, 8);  // an RDMA slab: never trimmed
  uint8_t* b = registered.acquire();
  b[0] = 1;
  registered.release(b);
  registered.trim(0);
  CHECK(registered.trim(0) == 0);
  CHECK(registered.residency_extent() == registered.slab_bytes());  // registration pins it whole
}

TEST_CASE("buffer pool: resident_bytes counts the written pages of a slab of any size, 0 when unmapped") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  BufferPool pool(page, 10000, /*trimmable=*/true);  // more pages than one mincore call takes
  CHECK(BufferPool::resident_bytes(pool.base(), pool.slab_bytes()) == 0);
  CHECK(pool.residency_extent() == 0);  // nothing handed out: nothing to look at
  std::vector<uint8_t*> bufs;
  for (int i = 0; i < 10000; ++i) bufs.push_back(pool.acquire());
  bufs.front()[0] = 1;
  bufs[4096][0] = 1;  // the first page of the second call's piece
  bufs.back()[page - 1] = 1;
  CHECK(BufferPool::resident_bytes(pool.base(), pool.slab_bytes()) == 3 * page);
  CHECK(pool.residency_extent() == pool.slab_bytes());  // every buffer was handed out
  CHECK(BufferPool::resident_bytes(pool.base(), pool.residency_extent()) == 3 * page);
  CHECK(BufferPool::resident_bytes(nullptr, pool.slab_bytes()) == 0);
  for (uint8_t* b : bufs) pool.release(b);
  // A range that is no longer mapped (a stopping worker's slab): 0, no error.
  void* gone = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(gone != MAP_FAILED);
  static_cast<uint8_t*>(gone)[0] = 1;
  CHECK(BufferPool::resident_bytes(static_cast<uint8_t*>(gone), 4 * page) == page);
  REQUIRE(munmap(gone, 4 * page) == 0);
  CHECK(BufferPool::resident_bytes(static_cast<uint8_t*>(gone), 4 * page) == 0);
}

TEST_CASE("buffer pool hands out each buffer once and reuses released ones") {
  BufferPool pool(100, 3);  // rounded to 128
  CHECK(pool.buffer_size() == 128);
  uint8_t* a = pool.acquire();
  uint8_t* b = pool.acquire();
  uint8_t* c = pool.acquire();
  CHECK(pool.acquire() == nullptr);
  CHECK(a != b);
  CHECK(b != c);
  pool.release(b);
  CHECK(pool.acquire() == b);
}

TEST_CASE("receive window: grants even small amounts once the sender is nearly out") {
  // Slow readers hold most of the window; a later, small delivery must still
  // be returned or the sender stalls with credit to spare on this side.
  ReceiveWindow w(1000);
  REQUIRE(w.on_receive(900));  // remaining 100 <= a quarter
  w.on_delivered(50);          // far below a quarter of the window
  CHECK(w.take_grant() == 50);
  CHECK(w.remaining() == 150);
}
