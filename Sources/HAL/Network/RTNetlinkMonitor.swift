internal import CShims
internal import Glibc
// `timeval` can be owned by whichever C module first includes <sys/time.h>; here that is CV4L2.
internal import CV4L2
public import Logging
import Synchronization

/// Watches the kernel's links, addresses and routes over rtnetlink and reports each change of
/// the ``NetworkPath``.
///
/// One `NETLINK_ROUTE` socket is subscribed to link, IPv4/IPv6 address and IPv4/IPv6 route
/// notifications; a second one asks for full dumps (`RTM_GETLINK`, `RTM_GETADDR`,
/// `RTM_GETROUTE`). A notification does not describe the path by itself (one
/// `ip route replace` sends several messages, and a full socket buffer loses some), so after
/// each burst, once `debounce` has passed without another message (or at most four times
/// `debounce` after the burst began), the monitor reads the whole state again and reports a
/// change only if the path differs.
///
/// The sockets are read on a thread of the monitor's own, blocked in `poll`, never on Swift's
/// cooperative pool. A ``changes()`` stream keeps its monitor alive until its consumer goes away
/// (cancelled, finished, or the stream dropped); ``close()``, or the last reference going away,
/// stops the thread, closes the descriptors and ends every stream. So
/// `for await change in try RTNetlinkMonitor(logger: logger).changes()` stops cleanly when its
/// task is cancelled. The monitor watches the network namespace it was created in.
public final class RTNetlinkMonitor: NetworkMonitor {
    /// `RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE`.
    static let groups = UInt32(RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE)

    private let worker: NetlinkWorker

    /// Opens and subscribes the sockets, reads the current path and starts the thread; throws
    /// a ``NetworkMonitorError`` if any of that fails, leaving nothing open.
    public init(logger: Logger, debounce: Duration = .milliseconds(75)) throws {
        worker = try NetlinkWorker(logger: logger, debounce: debounce)
    }

    deinit { worker.shutdown() }

    public var currentPath: NetworkPath { worker.currentPath }

    public func changes() -> AsyncStream<NetworkChange> { worker.subscribe(keepingAlive: self) }

    /// Stops the thread, closes the sockets and ends every stream. Safe to call more than once.
    public func close() { worker.shutdown() }
}

/// The sockets, the thread and the subscribers. `channel` and `buffer` belong to the thread
/// once it runs; everything the callers touch is behind `state`.
private final class NetlinkWorker: @unchecked Sendable {
    private struct State {
        var current: NetworkPath
        var subscribers: [Int: AsyncStream<NetworkChange>.Continuation] = [:]
        var nextSubscriber = 0
        var thread: NamedThread?
        var shutDown = false
        /// Set when the thread itself was asked to stop: it closes the descriptors as it ends.
        var closeOnExit = false
    }

    private let notifications: Int32
    private let wake: Int32
    private var channel: DumpChannel
    private let buffer: UnsafeMutableRawBufferPointer
    private let logger: Logger
    private let debounce: Duration
    private let state: Mutex<State>

    init(logger: Logger, debounce: Duration) throws {
        let notifications = try Self.openSocket(groups: RTNetlinkMonitor.groups)
        var opened = [notifications]
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
        let wake: Int32
        var channel: DumpChannel
        let initial: RTNetlinkSnapshot
        do {
            var size: Int32 = 1 << 20
            _ = setsockopt(notifications, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            let requests = try Self.openSocket(groups: 0)
            opened.append(requests)
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            _ = setsockopt(requests, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            wake = eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK))
            guard wake >= 0 else { throw NetworkMonitorError.wake(errno) }
            opened.append(wake)
            channel = DumpChannel(fd: requests, buffer: buffer)
            initial = try channel.snapshot()
        } catch {
            opened.forEach { _ = Glibc.close($0) }
            buffer.deallocate()
            throw error
        }
        self.notifications = notifications
        self.wake = wake
        self.channel = channel
        self.buffer = buffer
        self.logger = logger
        self.debounce = debounce
        self.state = Mutex(State(current: initial.path))
        try start()
        logger.info("network: watching rtnetlink", metadata: ["path": "\(initial.path)"])
    }

    deinit {
        let open = state.withLock { !$0.shutDown }
        if open { closeDescriptors() }
        buffer.deallocate()
    }

    var currentPath: NetworkPath { state.withLock { $0.current } }

    /// A new subscriber; `owner` lives as long as the stream has a consumer.
    func subscribe(keepingAlive owner: some AnyObject & Sendable) -> AsyncStream<NetworkChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: NetworkChange.self, bufferingPolicy: .bufferingNewest(16))
        let id = state.withLock { state in
            defer { state.nextSubscriber += 1 }
            return state.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            withExtendedLifetime(owner) {
                _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
            }
        }
        let added = state.withLock { state in
            guard !state.shutDown else { return false }
            state.subscribers[id] = continuation
            return true
        }
        if !added { continuation.finish() }
        return stream
    }

    func shutdown() {
        let taken = state.withLock { state -> (thread: NamedThread?, subscribers: [AsyncStream<NetworkChange>.Continuation])? in
            guard !state.shutDown else { return nil }
            state.shutDown = true
            defer {
                state.thread = nil
                state.subscribers = [:]
            }
            return (state.thread, Array(state.subscribers.values))
        }
        guard let taken else { return }
        if let thread = taken.thread {
            var one: UInt64 = 1
            _ = write(wake, &one, MemoryLayout<UInt64>.size)
            if thread.isCurrent {
                // Called back on the thread itself: it ends (and closes them) once this returns.
                state.withLock { $0.closeOnExit = true }
                thread.join()
            } else {
                thread.join()
                closeDescriptors()
            }
        } else {
            closeDescriptors()
        }
        taken.subscribers.forEach { $0.finish() }
        logger.debug("network: monitor closed")
    }

    private func closeDescriptors() {
        _ = Glibc.close(notifications)
        _ = Glibc.close(channel.fd)
        _ = Glibc.close(wake)
    }

    // MARK: - The thread

    /// The thread keeps the worker alive until its loop ends.
    private func start() throws {
        do {
            let thread = try NamedThread.start(name: "netmon") { [self] in run() }
            state.withLock { $0.thread = thread }
        } catch {
            state.withLock { $0.shutDown = true }
            closeDescriptors()
            throw NetworkMonitorError.thread(error.code)
        }
    }

    private func run() {
        let clock = ContinuousClock()
        var burstStart: ContinuousClock.Instant?
        var due: ContinuousClock.Instant?
        while true {
            var fds = [
                pollfd(fd: notifications, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake, events: Int16(POLLIN), revents: 0)
            ]
            let timeout = due.map { Self.milliseconds(from: clock.now, to: $0) } ?? -1
            if poll(&fds, 2, timeout) < 0 {
                let code = errno
                if code != EINTR {
                    logger.error("network: poll failed: \(String(cString: strerror(code)))")
                    usleep(100_000)
                }
                continue
            }
            if fds[1].revents != 0 {
                if state.withLock({ $0.closeOnExit }) { closeDescriptors() }
                return
            }
            if fds[0].revents != 0, drainNotifications() {
                let now = clock.now
                let start = burstStart ?? now
                burstStart = start
                due = min(now + debounce, start + debounce * 4)
            }
            if let dueAt = due, clock.now >= dueAt {
                burstStart = nil
                due = refresh() ? nil : clock.now + .seconds(1)
            }
        }
    }

    /// Reads every queued notification; true if there was any, or if some were lost.
    private func drainNotifications() -> Bool {
        var received = 0
        var lost = false
        while true {
            let count = recv(notifications, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 {
                received += 1
                continue
            }
            let code = errno
            if count == 0 || code == EAGAIN || code == EWOULDBLOCK { break }
            if code == EINTR { continue }
            if code == ENOBUFS {
                lost = true
                continue
            }
            logger.warning("network: reading notifications failed: \(String(cString: strerror(code)))")
            lost = true
            break
        }
        if lost { logger.debug("network: notifications were lost; reading the whole state again") }
        return received > 0 || lost
    }

    /// Dumps the state; reports a change if the path differs. False if the dump failed.
    private func refresh() -> Bool {
        let path: NetworkPath
        do {
            path = try channel.snapshot().path
        } catch {
            logger.warning("network: \(error) Trying again in 1 s.")
            return false
        }
        let (change, subscribers) = state.withLock { state -> (NetworkChange?, [AsyncStream<NetworkChange>.Continuation]) in
            guard path != state.current else { return (nil, []) }
            let change = NetworkChange(old: state.current, new: path)
            state.current = path
            return (change, Array(state.subscribers.values))
        }
        guard let change else { return true }
        logger.info("network: \(change)", metadata: ["path": "\(path)"])
        subscribers.forEach { $0.yield(change) }
        return true
    }

    // MARK: - Helpers

    private static func openSocket(groups: UInt32) throws -> Int32 {
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), NETLINK_ROUTE)
        guard fd >= 0 else { throw NetworkMonitorError.socket(errno) }
        var address = sockaddr_nl()
        address.nl_family = sa_family_t(AF_NETLINK)
        address.nl_groups = groups
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_nl>.size)) }
        }
        guard bound == 0 else {
            let code = errno
            _ = Glibc.close(fd)
            throw NetworkMonitorError.bind(groups: groups, code)
        }
        return fd
    }

    /// For `poll`: rounded up, so that the deadline has passed when it returns.
    private static func milliseconds(from now: ContinuousClock.Instant, to deadline: ContinuousClock.Instant) -> Int32 {
        let remaining = now.duration(to: deadline)
        guard remaining > .zero else { return 0 }
        let (seconds, attoseconds) = remaining.components
        return Int32(clamping: seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }
}

/// Asks the kernel for full dumps on a socket of its own, and reads the answers.
private struct DumpChannel {
    let fd: Int32
    let buffer: UnsafeMutableRawBufferPointer
    private var sequence: UInt32 = 0

    init(fd: Int32, buffer: UnsafeMutableRawBufferPointer) {
        self.fd = fd
        self.buffer = buffer
    }

    /// Links, then addresses, then routes. A dump the kernel marks as interrupted by a change
    /// (`NLM_F_DUMP_INTR`) is taken again, up to three times in all; the last one is used anyway
    /// (the change that interrupted it is also a notification, so another dump follows).
    mutating func snapshot() throws -> RTNetlinkSnapshot {
        var attempt = 0
        while true {
            attempt += 1
            var snapshot = RTNetlinkSnapshot()
            var interrupted = false
            for (type, name) in [(RTM_GETLINK, "RTM_GETLINK"), (RTM_GETADDR, "RTM_GETADDR"), (RTM_GETROUTE, "RTM_GETROUTE")] {
                if try dump(type, name, into: &snapshot) { interrupted = true }
            }
            if !interrupted || attempt == 3 { return snapshot }
        }
    }

    /// Sends one dump request for every family (`AF_UNSPEC`) and applies the answer; true if
    /// the kernel marked it interrupted.
    private mutating func dump(_ type: Int, _ name: String, into snapshot: inout RTNetlinkSnapshot) throws -> Bool {
        sequence &+= 1
        let familyHeaderSize =
            switch type {
            case Int(RTM_GETLINK): MemoryLayout<ifinfomsg>.size
            case Int(RTM_GETADDR): MemoryLayout<ifaddrmsg>.size
            default: MemoryLayout<rtmsg>.size
            }
        // NLMSG_LENGTH: the header, then the family header, all zero (AF_UNSPEC, every object).
        let length = Int(dashcam_NLMSG_HDRLEN) + familyHeaderSize
        var request = [UInt8](repeating: 0, count: Int(dashcam_nlmsg_align(UInt32(length))))
        let header = nlmsghdr(
            nlmsg_len: UInt32(length), nlmsg_type: UInt16(type),
            nlmsg_flags: UInt16(NLM_F_REQUEST | NLM_F_DUMP), nlmsg_seq: sequence, nlmsg_pid: 0)
        request.withUnsafeMutableBytes { $0.storeBytes(of: header, as: nlmsghdr.self) }
        while request.withUnsafeBytes({ send(fd, $0.baseAddress, length, 0) }) < 0 {
            let code = errno
            if code != EINTR { throw NetworkMonitorError.send(request: name, code) }
        }

        var interrupted = false
        while true {
            let count = recv(fd, buffer.baseAddress, buffer.count, Int32(MSG_TRUNC))
            if count < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { throw NetworkMonitorError.timedOut(request: name) }
                throw NetworkMonitorError.receive(request: name, code)
            }
            if count == 0 { throw NetworkMonitorError.receive(request: name, EIO) }
            if count > buffer.count { throw NetworkMonitorError.truncated(request: name, size: count) }
            for message in NetlinkMessages(UnsafeRawBufferPointer(buffer).bytes(0..<count)) {
                // A late answer to an earlier request that failed.
                guard message.sequence == sequence else { continue }
                if message.flags & UInt16(NLM_F_DUMP_INTR) != 0 { interrupted = true }
                switch Int32(message.type) {
                case NLMSG_DONE, NLMSG_ERROR:
                    // Both carry an int: 0, or a negative errno.
                    let code = message.payload.count >= 4 ? message.payload.loadUnaligned(as: Int32.self) : 0
                    if code < 0 { throw NetworkMonitorError.kernel(request: name, -code) }
                    return interrupted
                default:
                    snapshot.apply(message)
                }
            }
        }
    }
}
