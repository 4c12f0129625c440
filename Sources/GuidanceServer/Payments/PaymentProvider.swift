public import Foundation

/// A payment provider as the server uses one: it sends the owner's browser to pay a
/// ``Payment`` and later tells the server, by a signed webhook, whether it was paid. The webhook
/// is the only thing that credits usage (``OwnerStore/settlePayment(provider:id:paid:nowMs:)``):
/// the browser coming back proves nothing.
public protocol PaymentProvider: Sendable {
    /// The name payments are stored under (`payments.provider`).
    var name: String { get }
    /// Where the owner's browser goes to pay.
    func checkoutURL(for payment: Payment) -> String
    /// What a webhook says, if its signature holds; `signature` is the provider's header.
    func readWebhook(signature: String?, body: Data, nowSeconds: Int64) -> Result<WebhookEvent, WebhookRefusal>
}

public struct WebhookEvent: Sendable, Equatable {
    /// The provider's event id (a repeat has the same one).
    public var id: String
    public var paymentID: String
    public var paid: Bool
}

public enum WebhookRefusal: Error, Sendable, Equatable {
    case signature(WebhookSignature.Failure)
    /// Signed, but not an event this server reads.
    case unreadable(String)
}

/// A product an owner can buy: seconds of analysed video for a price (`payments.products`, each
/// `NAME=SECONDS=PRICE`, e.g. `1 hour=3600=4.99 EUR`).
public struct Product: Sendable, Equatable {
    public var name: String
    public var seconds: Int
    public var price: String

    /// `nil` unless `text` is `NAME=SECONDS=PRICE` with a name and a price of at most 64
    /// characters and 1…100 000 000 seconds.
    public init?(_ text: String) {
        let parts = text.split(separator: "=", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.count == 3, !parts[0].isEmpty, parts[0].count <= 64, !parts[2].isEmpty, parts[2].count <= 64,
            let seconds = Int(parts[1]), (1...100_000_000).contains(seconds)
        else { return nil }
        name = parts[0]
        self.seconds = seconds
        price = parts[2]
    }
}
