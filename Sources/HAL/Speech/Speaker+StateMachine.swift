extension Speaker {
    /// Which message plays, which waits, which is cut off and which is replaced: ``Speaker``'s
    /// rules with no thread, sink or synthesizer. The speaker's thread and its callers feed it
    /// under one lock; it answers what to do.
    ///
    /// - One message plays at a time (`current`).
    /// - Guidance: at most one waits (`pending`); a newer message replaces it, and it never starts.
    /// - A message to keep (`keep`, the device's status phrases: "Incident saved.") is never
    ///   replaced: it waits in `kept`, in order, up to ``keptLimit``; past that the oldest one
    ///   waiting is dropped, as replaced.
    /// - What starts next: the waiting guidance, then the kept messages in order. An urgent message
    ///   is guidance that also cuts off the one playing: ``shouldCut`` turns true, and the thread
    ///   stops it at its next block.
    /// - A kept message cut off while it plays waits again, first, to be heard whole; once only.
    /// - After ``shutDown()`` nothing waits, the one playing is cut, and nothing starts again.
    struct StateMachine<Message> {
        struct Entry {
            var id: Int
            var message: Message
            var urgent: Bool
            var keep = false
            /// A kept message that was cut off once and waits again.
            var again = false
        }

        /// How many kept messages wait at most.
        static var keptLimit: Int { 4 }

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
        private(set) var kept: [Entry] = []
        private(set) var current: Entry?
        /// The thread is to stop `current` at its next block.
        private(set) var shouldCut = false
        private(set) var isShutDown = false
        private(set) var stats = Speaker.Stats()
        private var nextID = 1

        /// Nothing playing and nothing waiting (or shut down): what ``Speaker/waitUntilIdle()`` waits for.
        var isIdle: Bool { isShutDown || (pending == nil && kept.isEmpty && current == nil) }

        /// Something for the thread to do: a message to start, or the end.
        var hasWork: Bool { pending != nil || !kept.isEmpty || isShutDown }

        /// `keep`: a message that no newer one replaces (see the rules above).
        mutating func say(_ message: Message, urgent: Bool, keep: Bool = false) -> Said {
            guard !isShutDown else { return Said(id: 0) }
            let id = nextID
            nextID += 1
            let entry = Entry(id: id, message: message, urgent: urgent, keep: keep)
            let replaced: Int?
            if keep && !urgent {
                replaced = kept.count >= Self.keptLimit ? kept.removeFirst().id : nil
                kept.append(entry)
            } else {
                replaced = pending?.id
                pending = entry
            }
            if replaced != nil { stats.replaced += 1 }
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
            if pending != nil {
                current = pending
                pending = nil
            } else {
                current = kept.isEmpty ? nil : kept.removeFirst()
            }
            shouldCut = false
            return current
        }

        /// The playing message ended so. True when the speaker is idle now.
        mutating func finished(_ outcome: Outcome) -> Bool {
            if outcome == .cutOff, var again = current, again.keep, !again.again {
                // Heard in part: it waits again, first of the kept, and is counted when it ends.
                again.again = true
                kept.insert(again, at: 0)
                current = nil
                shouldCut = false
                return false
            }
            switch outcome {
            case .spoken: stats.spoken += 1
            case .cutOff: stats.cutOff += 1
            case .failed: stats.failures += 1
            }
            current = nil
            shouldCut = false
            return pending == nil && kept.isEmpty
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
            kept = []
            return true
        }
    }
}
