import Foundation
public import GuidanceProtocol
import Synchronization
import Yams

/// Plays a YAML list of guidance items, in order or chosen by segment seq: for demos and tests.
///
/// ```yaml
/// - text: "보행자가 있습니다. 속도를 줄이세요."
///   lang: ko-KR
///   priority: urgent
/// - clear: true
/// ```
public final class ScriptedAnalyzer: SegmentAnalyzer {
    public struct Item: Codable, Sendable, Equatable {
        public var text: String?
        public var lang: String?
        public var clear: Bool?
        public var priority: ServerMessage.Priority?

        public init(text: String?, lang: String?, clear: Bool?, priority: ServerMessage.Priority?) {
            self.text = text
            self.lang = lang
            self.clear = clear
            self.priority = priority
        }
    }

    public enum Order: String, Sendable { case order, seq }

    public struct LoadError: Error, CustomStringConvertible {
        public let description: String
    }

    public let items: [Item]
    private let order: Order
    private let next = Mutex(0)

    public init(items: [Item], order: Order) {
        self.items = items
        self.order = order
    }

    public convenience init(file: String, order: Order) throws {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw LoadError(description: "\(file): cannot read the analyzer script: \(error.localizedDescription)")
        }
        do {
            let items = try YAMLDecoder().decode([Item].self, from: text)
            guard !items.isEmpty else { throw LoadError(description: "\(file): the analyzer script has no items") }
            self.init(items: items, order: order)
        } catch let error as LoadError {
            throw error
        } catch {
            throw LoadError(description: "\(file): not a list of guidance items (text, lang, clear, priority): \(error)")
        }
    }

    public func analyze(_ segment: ReceivedSegment) async throws -> ServerMessage.Guidance? {
        let index: Int =
            switch order {
            case .order:
                next.withLock { value in
                    defer { value += 1 }; return value % items.count
                }
            case .seq: segment.header.seq % items.count
            }
        let item = items[index]
        return .init(
            seq: segment.header.seq, text: item.text ?? "", lang: item.lang ?? segment.locale,
            clear: item.clear ?? false, priority: item.priority ?? .normal)
    }
}
