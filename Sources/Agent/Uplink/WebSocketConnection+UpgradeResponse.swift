import Foundation
import NIOCore
import NIOHTTP1
import Synchronization

extension WebSocketConnection {
    /// The upgrade response's status and `Retry-After`, noted before the upgrader sees the response.
    final class UpgradeResponse: Sendable {
        let value = Mutex<(status: Int, retryAfter: Duration?)?>(nil)
    }

    /// Sits right after the HTTP response decoder, notes the first response head and leaves the pipeline.
    final class UpgradeResponseRecorder: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPClientResponsePart
        typealias InboundOut = HTTPClientResponsePart

        private let response: UpgradeResponse

        init(_ response: UpgradeResponse) { self.response = response }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .head(let head) = unwrapInboundIn(data) else { return context.fireChannelRead(data) }
            let retryAfter = head.headers.first(name: "Retry-After").flatMap(Self.retryAfter)
            response.value.withLock { $0 = (Int(head.status.code), retryAfter) }
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }

        /// Delta-seconds or an HTTP-date (RFC 9110 §10.2.3); a date in the past is zero.
        static func retryAfter(_ value: String) -> Duration? {
            let value = value.trimmingCharacters(in: .whitespaces)
            if let seconds = Int(value) { return seconds >= 0 ? .seconds(seconds) : nil }
            let format = DateFormatter()
            format.locale = Locale(identifier: "en_US_POSIX")
            format.timeZone = TimeZone(identifier: "GMT")
            format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
            guard let date = format.date(from: value) else { return nil }
            return .milliseconds(max(0, Int(date.timeIntervalSinceNow * 1000)))
        }
    }
}
