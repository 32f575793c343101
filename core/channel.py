"""One client connection's bytes: request frames in, response frames out (Kafka's
KafkaChannel with its NetworkReceive and Send).

:class:`Channel` is an :class:`asyncio.BufferedProtocol`: the transport reads straight
into memory the channel hands it, with no StreamReader between them. Size prefixes and
small frames land in a fixed read buffer (several pipelined requests at once); a frame
body gets a bytearray of its own, which the transport fills directly once the body's
first bytes have been copied over. The body is never allocated from its declared size
alone: it starts at up to ``BODY_STEP`` bytes and doubles as its bytes arrive, so a
client that declares a large frame and stalls holds little memory. The body handed to
the broker is writable and belongs to that request alone, which lets validation stamp
offsets into the records in place instead of copying them.

The read buffer starts at ``READ_BUFFER_BYTES`` and doubles, up to
``READ_BUFFER_MAX_BYTES``, each time a read fills it while it starts with a whole frame: a
client that pipelines frames smaller than the buffer faster than they are answered
(librdkafka sends a partition's batches back to back) is then read in a few large reads
rather than many small ones, each of which could end mid-frame and send that frame's rest
down the slower body path. A frame larger than the buffer does not grow it (its body is
read into a buffer of its own anyway). It stays at its size for the connection's life.
Reading stops (the transport is paused) while the read buffer is full at its largest and
no body is being read: a connection whose requests the broker is not taking (a request in
flight, a throttle, the request queue full) holds at most ``READ_BUFFER_MAX_BYTES`` of
unread input.

Idle time is Kafka's: a wait for input fails with TimeoutError after ``idle_s`` seconds
without a byte, measured from the start of the wait or the last byte that arrived during
it, unless the client is still taking the end of a response (the write buffer shrank
since the timer last looked); a wait for the transport to take a response fails after
``idle_s`` seconds in which it took nothing. One timer per connection, not per wait: a
wait arms it if none is armed (or it is due too late), and it stays armed across waits;
when it fires during a wait that has not been quiet long enough, it is re-armed for the
rest; when it fires between waits, it lapses until the next wait.

Small responses to pipelined requests are corked: while the read buffer holds the client's
whole next request, an answer is held, and it goes out with the answer to the last request
buffered (or at the loop's next turn, should the task wait on something else first), so the
answers to requests a client pipelined reach the socket in one send instead of one each; a
send costs more than the rest of a small request on a VM. An answer with no whole request
behind it goes out at once: holding it to the loop's next turn would cost a turn per request.
At most ``CORK_FRAMES`` responses and ``CORK_BYTES`` bytes are held, which bounds both the
memory and the delay (the time the broker takes over that many small requests); a larger
response goes out at once, after what was held before it.
"""

from __future__ import annotations

import asyncio
import time

#: Per-connection buffer for size prefixes and small (pipelined) frames: its first size,
#: and the largest it grows to (see the module's docstring).
READ_BUFFER_BYTES = 64 * 1024
READ_BUFFER_MAX_BYTES = 256 * 1024
#: A body's first allocation, and the largest step it grows by beyond doubling.
BODY_STEP = 1 << 20
_SIZE_BYTES = 4
_PRODUCE = b"\x00\x00"  # a request header's API key (int16) for Produce
#: Small responses held for one send: at most this many, of at most this many bytes in all.
CORK_FRAMES = 16
CORK_BYTES = 64 * 1024


class FramePool:
    """Buffers reused for large Produce frames, one pool per broker, shared by its
    connections. A fresh megabyte buffer costs its page faults and zeroing every time
    (more than the rest of the request on a VM), a warm one nothing. At most ``buffers``
    are kept; when all are taken (that many large produces in flight at once) a frame gets
    a fresh buffer as any other. Only Produce frames are pooled: their only bytes that
    outlive the request are the records the log stores, which it copies if it keeps them
    in memory (the :class:`~brokkr.core.log.PartitionLog` contract)."""

    def __init__(self, buffers: int = 8, size: int = (1 << 20) + (64 << 10)):
        self.size = size
        self._max = buffers
        self._free: list[bytearray] = []

    def take(self) -> bytearray:
        return self._free.pop() if self._free else bytearray(self.size)

    def give(self, buffer: bytearray) -> None:
        if len(self._free) < self._max:
            self._free.append(buffer)


class Channel(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # asked once: asking costs a getpid() each time
        self._buf = bytearray(READ_BUFFER_BYTES)
        self._start = 0  # unread bytes are self._buf[self._start:self._end]
        self._end = 0
        self._body: bytearray | None = None  # the body being read, and its wanted size
        self._body_size = 0
        self._body_filled = 0
        self._into_body = False  # where the transport's next bytes go
        self._waiter: asyncio.Future | None = None
        #: The idle timer: armed by a wait when none is, kept across waits (arming one per
        #: wait costs about 2 us, a tenth of a small request), cancelled at close.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0  # monotonic time it fires
        self._wait_started = 0.0  # the wait in progress: its start and its idle_s
        self._wait_idle_s = 0.0
        self._unsent = 0  # the write buffer's size when last seen by the idle timer
        self._pooled: bytearray | None = None  # the pool's buffer the last frame was read into
        self._last_input = 0.0
        self._eof = False
        self._lost: BaseException | None = None
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future | None = None
        self._corked: list = []  # small responses not yet handed to the transport
        self._corked_bytes = 0

    # -- asyncio.BufferedProtocol ---------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        body = self._body
        self._into_body = body is not None and self._body_filled < self._body_size
        if self._into_body:
            if self._body_filled == len(body):  # grow: double, by at most BODY_STEP, never past the size
                grown = bytearray(min(self._body_size, len(body) + min(len(body), BODY_STEP)))
                grown[: len(body)] = body
                self._body = body = grown
            return memoryview(body)[self._body_filled : self._body_size]
        if self._end == len(self._buf):  # compact what is unread to the front
            self._move_unread(self._buf)
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._last_input = time.monotonic()
        if self._into_body:
            self._body_filled += nbytes
        else:
            self._end += nbytes
            if self._end == len(self._buf):
                if len(self._buf) < READ_BUFFER_MAX_BYTES and self._frame_buffered():
                    # Full, a whole frame first: the client pipelines more than it holds.
                    self._move_unread(bytearray(min(2 * len(self._buf), READ_BUFFER_MAX_BYTES)))
                elif self._start == 0:
                    self._pause_reading()  # full, and none of it taken: wait for the broker
        self._wake()

    def _move_unread(self, buf: bytearray) -> None:
        """Move the unread bytes to the front of ``buf``, which becomes the read buffer: the
        same one (compacting it) or a larger one (growing it). The slice is a copy, so the
        two may overlap."""
        unread = self._end - self._start
        buf[:unread] = self._buf[self._start : self._end]
        self._buf, self._start, self._end = buf, 0, unread

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_idle_timer()  # an armed timer would hold this channel, its buffers with it
        self._closed = True
        self._lost = exc
        self._wake()
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- reading --------------------------------------------------------------------------

    async def read_size(self, idle_s: float) -> int:
        """The next frame's size prefix (signed, as sent). IncompleteReadError at the end
        of input, ConnectionError when the connection is lost, TimeoutError when idle."""
        while self._end - self._start < _SIZE_BYTES:
            await self._wait(idle_s, _SIZE_BYTES - (self._end - self._start))
        return self.size_now()

    def size_now(self) -> int | None:
        """:meth:`read_size` without waiting: the size prefix if it is buffered, else None
        (nothing taken). The server asks this first, which costs no coroutine."""
        start = self._start
        if self._end - start < _SIZE_BYTES:
            return None
        self._start = start + _SIZE_BYTES
        return int.from_bytes(self._buf[start : start + _SIZE_BYTES], "big", signed=True)

    def body_now(self, size: int) -> bytearray | None:
        """:meth:`read_body` without waiting: the body if all of it is buffered (small or
        pipelined frames), else None (nothing taken)."""
        start = self._start
        if self._end - start < size:
            return None
        body = self._buf[start : start + size]
        self._taken(size)
        return body

    async def read_body(self, size: int, idle_s: float, pool: FramePool | None = None) -> bytearray | memoryview:
        """The ``size`` bytes of a frame's body (its size checked by the caller). A Produce
        frame that fits ``pool``'s buffers is read into one of them; :meth:`release`
        gives it back once the request is answered."""
        body = self.body_now(size)
        if body is not None:
            return body
        buffered = self._end - self._start
        start = self._start
        if pool is not None and size <= pool.size and buffered >= 2 and self._buf[start : start + 2] == _PRODUCE:
            body = self._pooled = pool.take()
        else:
            body = bytearray(min(size, max(buffered, BODY_STEP)))
        body[:buffered] = memoryview(self._buf)[start : self._end]
        self._taken(buffered)
        self._body, self._body_size, self._body_filled = body, size, buffered
        try:
            while self._body_filled < size:
                await self._wait(idle_s, size - self._body_filled)
            return self._body if len(self._body) == size else memoryview(self._body)[:size]
        finally:
            self._body = None

    def release(self, pool: FramePool) -> None:
        """The last frame's request is answered: its pooled buffer (if any) is free again."""
        if self._pooled is not None:
            pool.give(self._pooled)
            self._pooled = None

    async def drain_input(self, grace_s: float) -> None:
        """Read and drop input until the peer closes or ``grace_s`` passes (a final error
        response, waiting for the client to close first)."""
        deadline = time.monotonic() + grace_s
        while (left := deadline - time.monotonic()) > 0:
            self._start = self._end = 0
            self._resume_reading()
            try:
                await self._wait(left, 1)
            except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                return

    def _taken(self, n: int) -> None:
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        self._resume_reading()

    async def _wait(self, idle_s: float, wanted: int) -> None:
        if self._lost is not None or self._closed:
            raise ConnectionResetError("connection lost") from self._lost
        if self._eof:
            raise asyncio.IncompleteReadError(b"", wanted)
        self._waiter = waiter = self._running_loop().create_future()
        self._resume_reading()
        now = self._wait_started = time.monotonic()
        self._wait_idle_s = idle_s
        if self._timer is None or self._timer_due > now + idle_s:  # none armed, or one too late for this wait
            self._arm_idle_timer(idle_s, now)
        try:
            await waiter
        finally:
            self._waiter = None

    def _arm_idle_timer(self, delay: float, now: float) -> None:
        self._cancel_idle_timer()
        self._timer_due = now + delay
        self._timer = self._running_loop().call_later(delay, self._check_idle)

    def _cancel_idle_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_idle(self) -> None:
        """The idle timer fired: fail the wait in progress if it has been quiet for its
        ``idle_s``, else look again when it could be. Between waits it lapses (the broker
        is answering: no idle time); the next wait arms it again."""
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        now = time.monotonic()
        unsent = self.transport.get_write_buffer_size()
        if unsent and unsent != self._unsent:  # the client is still taking the last response
            self._unsent = unsent
            self._last_input = now
        quiet = now - max(self._wait_started, self._last_input)
        if quiet >= self._wait_idle_s:
            waiter.set_exception(TimeoutError())
        else:  # bytes arrived meanwhile, or the wait began after the timer was armed
            self._arm_idle_timer(self._wait_idle_s - quiet, now)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.transport.is_closing():
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and not self.transport.is_closing():
            self._reading_paused = False
            self.transport.resume_reading()

    # -- writing --------------------------------------------------------------------------

    def write(self, data) -> None:
        """Queue ``data`` for the client (corked if small, see the module's docstring);
        ConnectionResetError once the connection is going (asyncio would drop the data
        silently, uvloop raise RuntimeError)."""
        if self._closed or self.transport.is_closing():
            raise ConnectionResetError("connection lost")
        size = len(data)
        if not self._frame_buffered():  # the task waits for input next: send now, with what is held
            if self._corked and self._corked_bytes + size <= CORK_BYTES:
                self._corked.append(data)
                self.uncork()
            else:
                self.uncork()
                self.transport.write(data)
            return
        if self._corked_bytes + size > CORK_BYTES:
            self.uncork()
            if size > CORK_BYTES:
                self.transport.write(data)
                return
        if not self._corked:
            self._running_loop().call_soon(self.uncork)
        self._corked.append(data)
        self._corked_bytes += size
        if len(self._corked) >= CORK_FRAMES:
            self.uncork()

    def _frame_buffered(self) -> bool:
        """Whether the read buffer holds the whole next frame (the client pipelined it)."""
        start, buffered = self._start, self._end - self._start
        return buffered >= _SIZE_BYTES and buffered - _SIZE_BYTES >= int.from_bytes(
            self._buf[start : start + _SIZE_BYTES], "big"
        )

    def uncork(self) -> None:
        """Hand the held responses to the transport, in one write."""
        corked = self._corked
        if not corked:
            return
        self._corked, self._corked_bytes = [], 0
        if not (self._closed or self.transport.is_closing()):  # a lost connection drops them, as asyncio would
            self.transport.write(corked[0] if len(corked) == 1 else b"".join(corked))

    @property
    def blocked(self) -> bool:
        """Whether :meth:`drain` has anything to do (it waits, or raises): the transport
        took too much already, or the connection is gone. Asked before calling it."""
        return self._writing_paused or self._closed

    async def drain(self, idle_s: float) -> None:
        """Wait until the transport takes what was written (below its high-water mark).
        A client still reading is waited for; TimeoutError once it has taken nothing for
        ``idle_s`` (Kafka's idle expiry: a write that makes no progress is no activity)."""
        while self._writing_paused:
            if self._closed or self.transport.is_closing():
                raise ConnectionResetError("connection lost")
            unsent = self.transport.get_write_buffer_size()
            self._drain_waiter = waiter = self._running_loop().create_future()
            try:
                async with asyncio.timeout(idle_s):
                    await waiter
            except TimeoutError:
                if self.transport.get_write_buffer_size() >= unsent:
                    raise
        if self._closed:
            raise ConnectionResetError("connection lost")

    def close(self) -> None:
        self._cancel_idle_timer()
        if self.transport is not None:
            self.uncork()
            self.transport.close()
