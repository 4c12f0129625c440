/// Polls `condition` until it holds; false if `timeout` passes first.
///
/// The timeout only keeps a broken test from hanging: it is generous (a busy machine can take
/// seconds where an idle one takes milliseconds), and no test asserts how soon the condition held.
/// Sleeps between polls without holding one of the few threads every test's tasks run on.
public func eventually(
    within timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(5),
    _ condition: () -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return condition()
}

/// ``eventually(within:every:_:)`` for a condition that must be awaited (an actor's state).
public func eventually(
    within timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(5),
    _ condition: () async -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return await condition()
}
