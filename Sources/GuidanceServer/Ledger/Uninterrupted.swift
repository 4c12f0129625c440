/// Work that must finish once started, whatever happens to the task that asked for it: a
/// transaction (BEGIN … COMMIT or ROLLBACK), a group of charges. A WebSocket session that ends
/// cancels its tasks, and a cancelled task's next database call is never run
/// (`NIOThreadPool.runIfActive` drops it): inside a transaction that left `BEGIN IMMEDIATE` open
/// and the ledger file's write lock held until a restart.
///
/// `body` runs in a task of its own, which no caller's cancellation reaches; the caller waits for
/// its end (a cancelled caller too: the work is one unit, and its result is still the caller's).
///
/// - Important: `body` must end by itself (every statement it runs is bounded by the database's
///   own timeouts); nothing cancels it.
func uninterrupted<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await Task { try await body() }.value
}
