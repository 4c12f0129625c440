extension Speaker {
    /// Which message plays, which waits, which is cut off and which is replaced: ``Speaker``'s
    /// rules with no thread, sink or synthesizer. The speaker's thread and its callers feed it
    /// under one lock; it answers what to do.
    ///
    /// - One message plays at a time (`current`); at most one waits (`pending`).
    /// - A newer message replaces the one waiting, which never starts.
    /// - An urgent message also cuts off the one playing: ``shouldCut`` turns true, and the thread
    ///   stops it at its next block.
    /// - After ``shutDown()`` nothing waits, the one playing is cut, and nothing starts again.
    struct StateMachine<Message> {
        struct Entry {
            var id: Int
            var message: Message
            var urgent: Bool
        }

        /// What ``say(_:urgent:)`` did, for the log.
        struct Said: Equatable {
            /// The new message's number; 0 once shut down (it was dropped).
            var id: Int
            /// The waiting message it replaced.
            var replaced: Int?
            /// The playing message it cuts off.
            var cut: Int?
        }

        enum Outcome {
            case spoken
            case cutOff
            case failed
        }

        private(set) var pending: Entry?
        private(set) var current: Entry?
        /// The thread is to stop `current` at its next block.
        private(set) var shouldCut = false
        private(set) var isShutDown = false
        private(set) var stats = Speaker.Stats()
        private var nextID = 1

        /// Nothing playing and nothing waiting (or shut down): what ``Speaker/waitUntilIdle()`` waits for.
        var isIdle: Bool { isShutDown || (pending == nil && current == nil) }

        /// Something for the thread to do: a message to start, or the end.
        var hasWork: Bool { pending != nil || isShutDown }

        mutating func say(_ message: Message, urgent: Bool) -> Said {
            guard !isShutDown else { return Said(id: 0) }
            let id = nextID
            nextID += 1
            let replaced = pending?.id
            if replaced != nil { stats.replaced += 1 }
            pending = Entry(id: id, message: message, urgent: urgent)
            var cut: Int?
            if urgent, let current, !shouldCut {
                shouldCut = true
                cut = current.id
            }
            return Said(id: id, replaced: replaced, cut: cut)
        }

        /// The thread starts the waiting message; nil once shut down (the thread ends).
        mutating func start() -> Entry? {
            guard !isShutDown else { return nil }
            current = pending
            pending = nil
            shouldCut = false
            return current
        }

        /// The playing message ended so. True when the speaker is idle now.
        mutating func finished(_ outcome: Outcome) -> Bool {
            switch outcome {
            case .spoken: stats.spoken += 1
            case .cutOff: stats.cutOff += 1
            case .failed: stats.failures += 1
            }
            current = nil
            shouldCut = false
            return pending == nil
        }

        mutating func voiceFellBack() {
            stats.voiceFallbacks += 1
        }

        /// False if it was shut down already.
        mutating func shutDown() -> Bool {
            guard !isShutDown else { return false }
            isShutDown = true
            shouldCut = true
            pending = nil
            return true
        }
    }
}
