internal import CThreads
internal import Glibc

/// A joinable thread of the agent's own, named as `top -H` and `/proc/PID/task/*/comm` show it
/// (`capture`, `speech`, `espeak`, `haptics`, `netmon`).
///
/// The one way the agent starts a thread; each part that blocks in C runs its loop on one.
public struct NamedThread: Sendable {
    private let thread: pthread_t

    /// Starts `body` on a new thread named `name` (the kernel keeps its first 15 bytes).
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) throws(ThreadStartError) -> NamedThread {
        final class Start {
            let name: String
            let body: @Sendable () -> Void
            init(name: String, body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        let context = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(
            &thread, nil,
            { context in
                guard let context else { return nil }
                let start = Unmanaged<Start>.fromOpaque(context).takeRetainedValue()
                _ = dashcam_name_this_thread(start.name)
                start.body()
                return nil
            }, context)
        guard created == 0 else {
            Unmanaged<Start>.fromOpaque(context).release()
            throw ThreadStartError(name: name, code: created)
        }
        return NamedThread(thread: thread)
    }

    /// True on the thread itself (a callback from its own loop, which must not join it).
    public var isCurrent: Bool { pthread_equal(thread, pthread_self()) != 0 }

    /// Waits for the thread to end. From the thread itself it is detached instead, and ends
    /// when its body returns.
    public func join() {
        if isCurrent {
            pthread_detach(thread)
        } else {
            pthread_join(thread, nil)
        }
    }

    /// Lets the thread end on its own; it must not be joined after this.
    public func detach() { pthread_detach(thread) }
}

/// `pthread_create` failed (the limit of threads or memory was reached).
public struct ThreadStartError: Error, CustomStringConvertible, Sendable {
    public let name: String
    public let code: Int32

    public var description: String {
        "cannot start the \(name) thread: \(String(cString: strerror(code)))"
    }
}
