@testable import GuidanceServer
import Testing

/// The server's room for segments being received: taken whole, first come first served, given
/// back once; a waiter that is cancelled takes nothing and lets the next one in.
@Suite struct InFlightBudgetTests {
    /// Waits until `budget` has `count` waiters (the event itself, however long it takes).
    static func waiters(_ budget: InFlightBudget, _ count: Int) async {
        while budget.waiting != count { await Task.yield() }
    }

    @Test func roomIsTakenWholeAndWaitersGoInTheOrderTheyCame() async throws {
        let budget = InFlightBudget(capacity: 100)
        #expect(try await budget.reserve(70) == 70)
        actor Order { var names: [String] = []; func add(_ name: String) { names.append(name) } }
        let order = Order()
        // 50 does not fit beside 70; 10 would, but it came after 50 and waits its turn.
        let big = Task {
            let taken = try await budget.reserve(50); await order.add("50"); return taken
        }
        await Self.waiters(budget, 1)
        let small = Task {
            let taken = try await budget.reserve(10); await order.add("10"); return taken
        }
        await Self.waiters(budget, 2)
        #expect(budget.inFlight == 70)
        budget.release(70)
        #expect(try await big.value == 50)
        #expect(try await small.value == 10)
        #expect(await order.names == ["50", "10"])
        #expect(budget.inFlight == 60 && budget.waiting == 0)
        budget.release(50)
        budget.release(10)
        #expect(budget.inFlight == 0)
    }

    @Test func aSegmentLargerThanTheBudgetGoesAloneNotNever() async throws {
        let budget = InFlightBudget(capacity: 100)
        #expect(try await budget.reserve(10) == 10)
        let huge = Task { try await budget.reserve(1000) }
        await Self.waiters(budget, 1)
        budget.release(10)
        #expect(try await huge.value == 100)
        #expect(budget.inFlight == 100)
    }

    @Test func aCancelledWaiterTakesNothingAndTheNextGoesIn() async throws {
        let budget = InFlightBudget(capacity: 100)
        #expect(try await budget.reserve(60) == 60)
        let cancelled = Task { try await budget.reserve(80) }
        await Self.waiters(budget, 1)
        let next = Task { try await budget.reserve(40) }
        await Self.waiters(budget, 2)
        // The 80 at the head blocks the 40 that fits; its session ends (the car went away).
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(try await next.value == 40)
        #expect(budget.inFlight == 100 && budget.waiting == 0)
        // A task cancelled before it asks takes nothing either.
        let late = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await budget.reserve(10)
        }
        await #expect(throws: CancellationError.self) { try await late.value }
        #expect(budget.inFlight == 100)
    }
}
