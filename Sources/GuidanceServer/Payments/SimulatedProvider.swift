import Crypto
public import Foundation

/// A payment provider that needs no network, for trying the purchase flow end to end: its
/// checkout is a page of this server (`/simulated-provider/checkout/ID`) with Pay and Decline,
/// and either button makes it send a webhook to the server the way real providers do: a JSON
/// event, signed `t=…,v1=HMAC-SHA256` over the raw body with the endpoint's secret
/// (``WebhookSignature``), posted to `/webhooks/payments/simulated`.
public struct SimulatedProvider: PaymentProvider {
    public let name = "simulated"
    /// The endpoint secret (`payments.webhookSecretFile`), as bytes.
    let secret: [UInt8]
    let signature: WebhookSignature

    public init(secret: [UInt8], toleranceSeconds: Int64 = 300) {
        self.secret = secret
        signature = WebhookSignature(toleranceSeconds: toleranceSeconds)
    }

    public func checkoutURL(for payment: Payment) -> String { "/simulated-provider/checkout/\(payment.id)" }

    /// The event the provider sends for a decision on `paymentID`, and its signature header.
    public func event(paymentID: String, paid: Bool, eventID: String, timestamp: Int64) -> (body: Data, header: String) {
        let object: [String: Any] = [
            "id": eventID, "type": paid ? "payment.succeeded" : "payment.declined", "data": ["payment_id": paymentID]
        ]
        let body = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return (body, WebhookSignature.header(body: body, secret: SymmetricKey(data: secret), timestamp: timestamp))
    }

    public func readWebhook(signature header: String?, body: Data, nowSeconds: Int64) -> Result<WebhookEvent, WebhookRefusal> {
        if case .failure(let failure) = signature.verify(
            header: header, body: body, secret: SymmetricKey(data: secret), nowSeconds: nowSeconds)
        {
            return .failure(.signature(failure))
        }
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any],
            let id = object["id"] as? String, !id.isEmpty, id.count <= 128,
            let type = object["type"] as? String, type == "payment.succeeded" || type == "payment.declined",
            let payment = (object["data"] as? [String: Any])?["payment_id"] as? String, !payment.isEmpty, payment.count <= 128
        else { return .failure(.unreadable("not a payment event")) }
        return .success(WebhookEvent(id: id, paymentID: payment, paid: type == "payment.succeeded"))
    }
}
