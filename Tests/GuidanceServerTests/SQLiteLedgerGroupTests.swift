import Foundation
@testable import GuidanceServer
import Logging
import Testing

/// Charges that arrive together are written in groups: each still gets its own result, a key is
/// charged once whatever the group, and the balances add up.
@Suite struct SQLiteLedgerGroupTests {
    static func sha(_ n: Int) -> String { String(repeating: String(n % 16, radix: 16), count: 64) }

    @Test func concurrentChargesEachGetTheirOwnResult() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-groups-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let ledger = try await SQLiteLedger.open(path: folder.appendingPathComponent("usage.sqlite").path, logger: Logger(label: "ledger"))
        // 20 devices × 20 segments, each charged twice at once: once with its own digest, once
        // with another (a different segment under the same seq).
        let charges = (0..<20).flatMap { device in
            (0..<20).flatMap { seq in
                [
                    UsageCharge(device: "car-\(device)", stream: "s", seq: seq, sha256: Self.sha(seq), seconds: 5),
                    UsageCharge(device: "car-\(device)", stream: "s", seq: seq, sha256: Self.sha(seq + 1), seconds: 5)
                ]
            }
        }
        let results = try await withThrowingTaskGroup(of: (UsageCharge, ChargeResult).self) { group in
            for charge in charges { group.addTask { (charge, try await ledger.charge(charge)) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.count == charges.count)
        // Of each pair, exactly one was charged; the other was told the digest that was.
        let byKey = Dictionary(grouping: results) { "\($0.0.device)/\($0.0.seq)" }
        #expect(byKey.count == 400)
        for (_, pair) in byKey {
            let charged = pair.filter { if case .charged = $0.1 { true } else { false } }
            #expect(charged.count == 1)
            for (charge, result) in pair {
                if case .alreadyCharged(_, let stored) = result {
                    #expect(stored == charged.first?.0.sha256)
                    #expect(stored != charge.sha256)
                }
            }
        }
        // Charged again, alone: already charged, with the stored digest.
        let again = try await ledger.charge(charges[0])
        if case .alreadyCharged(let balance, _) = again {
            #expect(balance.spentSeconds == 100)
            #expect(balance.segments == 20)
        } else {
            Issue.record("a charge written in a group was charged again: \(again)")
        }
        let balances = try await ledger.balances()
        #expect(balances.count == 20)
        #expect(balances.allSatisfy { $0.spentSeconds == 100 && $0.segments == 20 })
        try await ledger.shutdown()
    }
}
