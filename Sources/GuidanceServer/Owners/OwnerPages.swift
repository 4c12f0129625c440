import AsyncHTTPClient
import Crypto
import Foundation
import Glibc
import GuidanceProtocol
import Hummingbird
import HummingbirdAuth
import Logging
import Mustache
import NIOCore
import NIOPosix
import NIOHTTP1
import Synchronization
import HTTPTypes

/// What a signed-in owner's session holds: who, and the CSRF value every form of theirs carries.
struct WebSession: Codable, Sendable {
    var owner: Int64
    var csrf: String
    /// When it was signed in, and from what browser (`User-Agent`, cut): what the sessions page
    /// shows the owner. Absent in sessions made before the page existed.
    var createdAtMs: Int64?
    var agent: String?
    /// Which password the session was signed in with (``OwnerPages/stamp(_:)`` of its hash): a
    /// session whose owner has set another password since is over, even one whose sign-in
    /// checked the old password while the new one was being set.
    var stamp: String?
}

/// The owners' web pages, served by the guidance server (plain HTML from the templates in
/// `Owners/Pages`, no script): set a password from a one-time link, sign in and out, pair a car
/// by the code it says, see one's cars (remaining usage, last seen, last guidance), rename and
/// unpair them, and buy usage through the payment provider.
///
/// - Sessions: HummingbirdAuth's session storage on the ledger's database (``SQLiteSessionDriver``),
///   keys stored hashed, in a cookie that is HttpOnly, SameSite=Strict, and Secure over HTTPS
///   (the server's TLS, or its proxy's: ``SecureTransport``). An owner lists and ends their
///   sessions; a new password ends them all.
/// - Guessing is bounded where a guessable value is taken: codes at `/pair` and `/pair/decide`,
///   passwords at `/signin`, links at `/set-password` (``CodeEntryLimiter``). bcrypt runs after
///   every cheap check, on a thread of its own (``PasswordHashing``).
/// - CSRF: every form carries a value that must match: the session's once signed in, before that
///   a cookie's (double submit). SameSite=Strict stops the cookie on other sites' requests too.
/// - Nothing secret is logged: no code (only a hash prefix), cookie, CSRF value or password.
struct OwnerPages: Sendable {
    let store: any PairingStore & OwnerStore
    let ledger: any UsageLedger
    let sessions: SessionStorage<WebSession>
    let library: MustacheLibrary
    let products: [Product]
    let provider: (any PaymentProvider)?
    /// `usage.remainingSeconds`: what each device starts with.
    let allowance: Int?
    let secureCookies: Bool
    let unpaired: UnpairedDevices
    let metrics: ServerMetrics
    /// Where the simulated provider posts its webhooks (this server); `nil` until it listens.
    let webhookBase: @Sendable () -> String?
    /// The clips cars uploaded (``ClipStore``), shown on the events pages; nil: no such pages.
    var clips: (any ClipStore)? = nil
    /// What the clips of one owner's cars may take of the store (``ClipQuota``), shown on Events.
    var clipBytesPerOwner: Int? = nil
    /// Signs and checks the links that show one clip without an account.
    var shareLinks: ShareLinks? = nil
    /// Where the pages are reached from outside (`https://HOST`), from `pairing.verificationURI`;
    /// nil: the request's own host, if it is a plain host name.
    var publicOrigin: String? = nil
    /// Whether the server can send e-mail (`mail.relay`): the settings page offers impact mails.
    var mailRelay = false
    let logger: Logger
    let now: @Sendable () -> Int64

    /// Lines a peer could make come fast: refused webhooks and forms, wrong codes.
    let noisy = LogLimit()

    static let sessionLifetime = Duration.seconds(12 * 3600)
    /// The session cookie's name, and the prefix HummingbirdAuth's storage puts before its value
    /// to make the stored key (``SessionStorageConfiguration``'s default).
    static let sessionCookie = "session"
    static let sessionKeyPrefix = SessionStorageConfiguration().keyPrefix
    static let preCookie = "csrf_pre"
    static let maxFormBytes = 8 * 1024

    func add(to router: Router<GuidanceRequestContext>) {
        router.add(middleware: PageLanguage())
        router.get("/static/owner.css") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/css; charset=utf-8", .cacheControl: "max-age=300"],
                body: .init(byteBuffer: ByteBuffer(string: OwnerTemplates.stylesheet)))
        }
        router.get("/signin") { request, _ in try await prePage(request, "signin", ["title": t("Sign in")]) }
        router.post("/signin") { request, context in try await signIn(request, address: Self.address(request, context)) }
        router.post("/signout") { request, _ in try await signOut(request) }
        router.get("/set-password") { request, _ in
            try await prePage(
                request, "set-password", ["title": t("Set your password"), "token": request.uri.queryParameters.get("token") ?? ""])
        }
        router.post("/set-password") { request, context in try await setPassword(request, address: Self.address(request, context)) }
        router.get("/sessions") { request, _ in try await signedIn(request) { try await sessionsPage(request, $0, notice: nil) } }
        router.post("/sessions/:id/end") { request, context in
            let id = context.parameters.get("id") ?? ""
            return try await signedInForm(request) { session, _ in
                guard try await store.endWebSession(owner: session.owner, id: id) else {
                    return try await sessionsPage(request, session, notice: nil, problem: t("That session had already ended."))
                }
                logger.notice("owner ended a session", metadata: ["owner": "\(session.owner)"])
                // Ending this browser's own session signs it out.
                return redirect(id == Self.sessionID(request) ? "/signin" : "/sessions")
            }
        }
        router.get("/") { request, _ in try await signedIn(request) { try await devicesPage($0, notice: nil, problem: nil) } }
        router.get("/pair") { request, _ in
            try await signedIn(request) { session in
                let code = String((request.uri.queryParameters.get("code") ?? "").prefix(32))
                return page("pair", session, ["title": t("Pair a car"), "code": DeviceCodes.normalize(code).map(DeviceCodes.grouped) ?? ""])
            }
        }
        router.post("/pair") { request, context in
            let address = Self.address(request, context)
            return try await signedInForm(request) { session, form in try await lookUp(address, session, form) }
        }
        router.post("/pair/decide") { request, context in
            let address = Self.address(request, context)
            return try await signedInForm(request) { session, form in try await decide(address, session, form) }
        }
        router.post("/devices/:device/rename") { request, context in
            let device = context.parameters.get("device") ?? ""
            return try await signedInForm(request) { session, form in
                let label = Self.cleanLabel(form["label"] ?? "")
                guard !label.isEmpty else {
                    return try await devicesPage(session, notice: nil, problem: t("A car's name cannot be empty."))
                }
                let renamed = try await store.rename(device: device, owner: session.owner, label: label)
                return try await devicesPage(
                    session, notice: renamed ? t("Renamed to {name}.", ["name": label]) : nil,
                    problem: renamed ? nil : t("That car is not yours."))
            }
        }
        router.post("/devices/:device/unpair") { request, context in
            let device = context.parameters.get("device") ?? ""
            return try await signedInForm(request) { session, _ in
                guard try await store.unpair(device: device, owner: session.owner, nowMs: now()) else {
                    return try await devicesPage(session, notice: nil, problem: t("That car is not yours."))
                }
                // Its live stream is closed now (4401), its access token refused from now on.
                unpaired.add(device)
                logger.notice("device unpaired by its owner", metadata: ["device": "\(device)", "owner": "\(session.owner)"])
                return try await devicesPage(session, notice: t("The car was unpaired. It will offer a new code."), problem: nil)
            }
        }
        router.get("/buy") { request, _ in
            try await signedIn(request) { session in
                let device = request.uri.queryParameters.get("device") ?? ""
                guard let car = try await store.devices(owner: session.owner).first(where: { $0.device == device }) else {
                    return try await devicesPage(session, notice: nil, problem: t("That car is not yours."))
                }
                let offered =
                    provider == nil
                    ? []
                    : products.enumerated().map {
                        ["index": $0.offset, "name": $0.element.name, "price": $0.element.price, "device": device] as [String: Any]
                    }
                return page(
                    "buy", session,
                    ["title": t("Buy usage for {name}", ["name": car.label]), "products": offered, "hasProducts": !offered.isEmpty])
            }
        }
        router.post("/buy") { request, _ in try await signedInForm(request) { session, form in try await buy(session, form) } }
        if let simulated = provider as? SimulatedProvider {
            // The buying owner's alone: anyone else with the URL is sent to sign in, or told no
            // such payment exists.
            router.get("/simulated-provider/checkout/:payment") { request, context in
                let id = context.parameters.get("payment") ?? ""
                return try await signedIn(request) { session in
                    guard let payment = try await store.payment(provider: simulated.name, id: id), payment.status == .pending,
                        payment.owner == session.owner
                    else { return noSuchPayment(session) }
                    return page(
                        "checkout", session,
                        [
                            "title": t("Simulated payment"), "price": payment.price,
                            "product": payment.product, "payment": payment.id
                        ])
                }
            }
            router.post("/simulated-provider/checkout/:payment") { request, context in
                let id = context.parameters.get("payment") ?? ""
                return try await signedInForm(request) { session, form in
                    try await simulatedDecision(session, form, id: id, provider: simulated)
                }
            }
        }
        if let provider {
            router.post("/webhooks/payments/\(provider.name)") { request, _ in try await webhook(request, provider: provider) }
        }
        addSettings(to: router)
        if let clips { addEvents(to: router, clips: clips) }
        addTrips(to: router)
    }

    // MARK: - Pages

    private func noSuchPayment(_ session: WebSession) -> Response {
        page("message", session, ["title": t("No such payment"), "next": "/", "nextLabel": t("Back to my cars")], status: .notFound)
    }

    /// A page in the request's language (``PageText/current``): its phrases, and `lang` for `<html>`.
    func render(_ template: String, _ values: [String: Any]) -> String {
        let text = PageText.current
        let values = values.merging(["t": text.lambda, "lang": text.language]) { a, _ in a }
        return library.render(values, withTemplate: template) ?? "template \(template) is missing"
    }

    /// This request's texts: ``PageText/current``.
    var t: PageText { PageText.current }

    func html(_ status: HTTPResponse.Status, _ body: String, cookies: [Cookie] = []) -> Response {
        var headers: HTTPFields = [
            .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
            .contentSecurityPolicy:
                "default-src 'none'; style-src 'self'; media-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            .init("X-Content-Type-Options")!: "nosniff", .init("Referrer-Policy")!: "no-referrer"
        ]
        for cookie in cookies { headers.append(.init(name: .setCookie, value: cookie.description)) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    func page(_ template: String, _ session: WebSession, _ values: [String: Any], status: HTTPResponse.Status = .ok) -> Response {
        html(status, render(template, values.merging(["signedIn": true, "csrf": session.csrf]) { a, _ in a }))
    }

    func redirect(_ location: String, cookies: [Cookie] = []) -> Response {
        var response = Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store"])
        for cookie in cookies { response.headers.append(.init(name: .setCookie, value: cookie.description)) }
        return response
    }

    /// A page before sign-in: its forms carry the value of a cookie set here (double submit).
    private func prePage(_ request: Request, _ template: String, _ values: [String: Any], status: HTTPResponse.Status = .ok) async throws
        -> Response
    {
        let value = request.cookies[Self.preCookie]?.value ?? Self.random()
        let cookie = Cookie(name: Self.preCookie, value: value, path: "/", secure: secureCookies, httpOnly: true, sameSite: .strict)
        return html(status, render(template, values.merging(["csrf": value]) { a, _ in a }), cookies: [cookie])
    }

    private func devicesPage(_ session: WebSession, notice: String?, problem: String?) async throws -> Response {
        let cars = try await store.devices(owner: session.owner)
        let clock = try await ownerClock(session)
        var rows: [[String: Any]] = []
        for car in cars {
            let balance = try await ledger.balance(device: car.device)
            let remaining = balance.remaining(allowance: allowance).map { Self.spoken($0, t) } ?? t("unlimited")
            rows.append([
                "device": car.device, "label": car.label, "remaining": remaining, "pairedSince": clock.text(car.pairedAtMs),
                "lastSeen": car.lastSeenAtMs.map(clock.text) ?? t("not yet"),
                "guidance": car.recentGuidance.map { ["at": clock.text($0.atMs), "text": $0.text] },
                "hasGuidance": !car.recentGuidance.isEmpty
            ])
        }
        var values: [String: Any] = ["title": t("My cars"), "devices": rows, "hasDevices": !rows.isEmpty]
        if let notice { values["notice"] = notice }
        if let problem { values["problem"] = problem }
        return page("devices", session, values)
    }

    private func sessionsPage(_ request: Request, _ session: WebSession, notice: String?, problem: String? = nil) async throws -> Response {
        let current = Self.sessionID(request)
        let clock = try await ownerClock(session)
        let rows: [[String: Any]] = try await store.webSessions(owner: session.owner, nowMs: now()).map { stored in
            let value = try? JSONDecoder().decode(WebSession.self, from: stored.value)
            return [
                "id": stored.id, "current": stored.id == current,
                "created": value?.createdAtMs.map(clock.text) ?? t("before sessions were listed"),
                "agent": value?.agent ?? t("a browser"), "expires": stored.expiresAtMs.map(clock.text) ?? t("never")
            ]
        }.sorted { ($0["current"] as? Bool ?? false) && !($1["current"] as? Bool ?? false) }
        var values: [String: Any] = ["title": t("Signed-in sessions"), "sessions": rows]
        if let notice { values["notice"] = notice }
        if let problem { values["problem"] = problem }
        return page("sessions", session, values)
    }

    // MARK: - Sessions and forms

    private func form(_ request: Request) async throws -> [String: String] {
        await FormBody.read(request, maxBytes: Self.maxFormBytes) ?? [:]
    }

    func signedIn(_ request: Request, _ body: (WebSession) async throws -> Response) async throws -> Response {
        guard let session = try await current(request) else { return redirect("/signin") }
        return try await inOwnersLanguage(session) { try await body(session) }
    }

    /// The owner's chosen language, where they chose one, for what `body` renders.
    private func inOwnersLanguage(_ session: WebSession, _ body: () async throws -> Response) async throws -> Response {
        guard let language = try await store.preferences(owner: session.owner).language else { return try await body() }
        return try await PageText.$current.withValue(.of(language)) { try await body() }
    }

    /// The request's session, if it is one and its owner's password is still the one it was
    /// signed in with.
    private func current(_ request: Request) async throws -> WebSession? {
        guard let session = try? await sessions.load(request: request), let stamp = session.stamp,
            let hash = try await store.passwordHash(owner: session.owner), Self.same(stamp, Self.stamp(hash))
        else { return nil }
        return session
    }

    /// A short digest of a password hash: what a session keeps to know its password is current.
    static func stamp(_ passwordHash: String) -> String { String(PairingEndpoints.hash(passwordHash).prefix(16)) }

    /// A form of a signed-in owner: refused unless its CSRF value is the session's.
    func signedInForm(_ request: Request, _ body: (WebSession, [String: String]) async throws -> Response) async throws -> Response {
        guard let session = try await current(request) else { return redirect("/signin") }
        let fields = try await form(request)
        guard let csrf = fields["csrf"], Self.same(csrf, session.csrf) else {
            noisy.log(logger, .warning, "refused a form without the session's CSRF value", metadata: ["owner": "\(session.owner)"])
            return html(.forbidden, render("message", ["title": t("This form has expired"), "next": "/", "nextLabel": t("Start again")]))
        }
        return try await inOwnersLanguage(session) { try await body(session, fields) }
    }

    /// A form before sign-in: its CSRF value must be the cookie's.
    private func preForm(_ request: Request) async throws -> [String: String]? {
        let fields = try await form(request)
        guard let cookie = request.cookies[Self.preCookie]?.value, let csrf = fields["csrf"], Self.same(cookie, csrf) else { return nil }
        return fields
    }

    private func signIn(_ request: Request, address: String) async throws -> Response {
        guard let fields = try await preForm(request) else {
            return try await prePage(
                request, "signin", ["title": t("Sign in"), "problem": t("The form had expired. Please sign in again.")], status: .forbidden)
        }
        let email = Self.normalizedEmail(fields["email"] ?? "")
        let password = fields["password"] ?? ""
        // Counted before the password is checked, per address typed (known or not) and per client:
        // the answer past the limit is the same for every address, so it tells nothing of accounts.
        let throttles = CodeEntryLimiter.signIn(email: email, address: address)
        let tried = now()
        if let wait = try await store.attempt(throttles, nowMs: tried) {
            noisy.log(logger, .warning, "sign-in refused: too many tries", metadata: ["account": "\(PairingEndpoints.fingerprint(email))"])
            return try await prePage(
                request, "signin",
                [
                    "title": t("Sign in"), "email": email,
                    "problem": t("Too many tries. Try again in {wait}.", ["wait": t.minutes(Self.minutes(wait))])
                ], status: .tooManyRequests)
        }
        let account = try await store.account(email: email)
        // bcrypt takes a quarter of a second on purpose: off the event loop, and done for an
        // unknown address too, so the time does not tell which addresses have accounts. A password
        // bcrypt would cut (over 72 bytes, or with a NUL) can match no stored one.
        let hash = account?.passwordHash ?? OwnerTemplates.dummyHash
        let matches: Bool
        do {
            matches = try await PasswordHashing.shared.verify(password, hash: hash) && PasswordRules.fitsBcrypt(password)
            metrics.passwordHashed()
        } catch is PasswordHashing.Busy {
            // Not a try: nothing was checked. Counted, a stranger keeping the hashes busy would
            // lock every owner who tried meanwhile out.
            try await store.forgive(throttles.map(\.key), atMs: tried)
            return try await busy(request, "signin", ["title": t("Sign in"), "email": email])
        }
        guard let owner = account?.owner, account?.passwordHash != nil, matches else {
            noisy.log(logger, .notice, "a sign-in failed", metadata: ["account": "\(PairingEndpoints.fingerprint(email))"])
            return try await prePage(
                request, "signin", ["title": t("Sign in"), "email": email, "problem": t("That address and password do not match.")],
                status: .unauthorized)
        }
        try await store.forgive(throttles.map(\.key), atMs: tried)
        let agent = String(
            (request.headers[.userAgent] ?? "").unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7f }.prefix(120)
                .map(Character.init).map(String.init).joined())
        var cookie = try await sessions.save(
            session: WebSession(
                owner: owner.id, csrf: Self.random(), createdAtMs: tried, agent: agent,
                stamp: Self.stamp(hash)), expiresIn: Self.sessionLifetime)
        cookie = Cookie(
            name: cookie.name, value: cookie.value, expires: cookie.expires, path: "/", secure: secureCookies, httpOnly: true,
            sameSite: .strict)
        logger.info("owner signed in", metadata: ["owner": "\(owner.id)"])
        return redirect("/", cookies: [cookie])
    }

    /// The page again with 503: too many passwords are being hashed right now.
    private func busy(_ request: Request, _ template: String, _ values: [String: Any]) async throws -> Response {
        noisy.log(logger, .warning, "a password page was answered 503: \(PasswordHashing.maxWaiting) hashes already waiting")
        var response = try await prePage(
            request, template, values.merging(["problem": t("The server is busy. Try again in a moment.")]) { $1 },
            status: .serviceUnavailable)
        response.headers[.retryAfter] = "2"
        return response
    }

    private func signOut(_ request: Request) async throws -> Response {
        try await signedInForm(request) { _, _ in
            var cookie = try await sessions.delete(request: request)
            cookie = Cookie(
                name: cookie.name, value: "", expires: Date(timeIntervalSince1970: 0), path: "/", secure: secureCookies,
                httpOnly: true, sameSite: .strict)
            return redirect("/signin", cookies: [cookie])
        }
    }

    private func setPassword(_ request: Request, address: String) async throws -> Response {
        guard let fields = try await preForm(request) else {
            return try await prePage(
                request, "signin", ["title": t("Sign in"), "problem": t("The form had expired. Open the link again.")], status: .forbidden)
        }
        let token = fields["token"] ?? "", password = fields["password"] ?? ""
        if let problem = PasswordRules.problem(password, again: fields["again"]) {
            return try await prePage(
                request, "set-password", ["title": t("Set your password"), "token": token, "problem": problem],
                status: .badRequest)
        }
        // Every cheap check before bcrypt: the link tried (counted per address) and live.
        let throttle = Throttle("link-address:\(address)", CodeEntryLimiter.linksPerAddress)
        let tried = now()
        if let wait = try await store.attempt([throttle], nowMs: tried) {
            return try await prePage(
                request, "signin",
                ["title": t("Sign in"), "problem": t("Too many tries. Try again in {wait}.", ["wait": t.minutes(Self.minutes(wait))])],
                status: .tooManyRequests)
        }
        let tokenHash = PairingEndpoints.hash(token)
        let gone = {
            try await prePage(
                request, "signin", ["title": t("Sign in"), "problem": t("That link was used or has expired. Ask for a new one.")],
                status: .gone)
        }
        guard try await store.passwordLinkOwner(tokenHash: tokenHash, nowMs: tried) != nil else {
            noisy.log(logger, .notice, "a password link did not match", metadata: ["link": "\(String(tokenHash.prefix(6)))"])
            return try await gone()
        }
        try await store.forgive([throttle.key], atMs: tried)
        let hash: String
        do {
            hash = try await PasswordHashing.shared.hash(password)
            metrics.passwordHashed()
        } catch is PasswordHashing.Busy {
            return try await busy(request, "set-password", ["title": t("Set your password"), "token": token])
        }
        // Spending the link also spends the owner's other links and ends their sessions.
        guard let owner = try await store.usePasswordLink(tokenHash: tokenHash, passwordHash: hash, nowMs: now()) else {
            return try await gone()
        }
        logger.notice("owner set a password; their other links and every session of theirs are ended", metadata: ["owner": "\(owner)"])
        return try await prePage(request, "signin", ["title": t("Sign in"), "notice": t("Your password is set. Sign in.")])
    }

    // MARK: - Pairing

    private func lookUp(_ address: String, _ session: WebSession, _ fields: [String: String]) async throws -> Response {
        let typed = fields["code"] ?? ""
        guard let code = DeviceCodes.normalize(typed) else {
            return page("pair", session, ["title": t("Pair a car"), "problem": t("A car's code is nine digits.")], status: .badRequest)
        }
        switch try await store.lookUp(userCode: code, owner: session.owner, address: address, nowMs: now()) {
        case .pending(let deviceName, _):
            return page("approve", session, ["title": t("Pair this car?"), "deviceName": deviceName, "code": code])
        case .wrong:
            noisy.log(
                logger, .notice, "a pairing code did not match",
                metadata: ["owner": "\(session.owner)", "code": "\(PairingEndpoints.fingerprint(code))"])
            return page(
                "pair", session, ["title": t("Pair a car"), "problem": t("No car is waiting with that code. Check it and try again.")],
                status: .badRequest)
        case .limited(let seconds):
            return tooManyCodes(session, waitSeconds: seconds)
        }
    }

    /// The pairing page again, saying when another code may be typed.
    private func tooManyCodes(_ session: WebSession, waitSeconds: Int) -> Response {
        page(
            "pair", session,
            [
                "title": t("Pair a car"),
                "problem": t("Too many wrong codes. Try again in {wait}.", ["wait": t.minutes(Self.minutes(waitSeconds))])
            ],
            status: .tooManyRequests)
    }

    private func decide(_ address: String, _ session: WebSession, _ fields: [String: String]) async throws -> Response {
        guard let code = DeviceCodes.normalize(fields["code"] ?? "") else { return redirect("/pair") }
        let approve = fields["decision"] == "approve"
        let outcome = try await store.decide(
            userCode: code, decision: approve ? .approve(owner: session.owner) : .deny, owner: session.owner,
            address: address, nowMs: now())
        switch outcome {
        case .decided:
            logger.notice(approve ? "pairing approved" : "pairing denied", metadata: ["owner": "\(session.owner)"])
            return html(
                .ok,
                render(
                    "message",
                    [
                        "title": approve ? t("The car is being paired") : t("The car was not paired"), "signedIn": true,
                        "csrf": session.csrf,
                        "notice": approve
                            ? t("In a few seconds the car says the name of your account.") : t("The car will offer a new code."),
                        "next": "/", "nextLabel": t("My cars")
                    ]))
        case .gone:
            return page(
                "pair", session, ["title": t("Pair a car"), "problem": t("That code has expired or was used. The car says a new one.")],
                status: .gone)
        case .wrong, .locked:
            noisy.log(
                logger, .notice,
                outcome == .locked
                    ? "a pairing code did not match; the code it named is locked"
                    : "a pairing code did not match at a decision",
                metadata: ["owner": "\(session.owner)", "code": "\(PairingEndpoints.fingerprint(code))"])
            return page(
                "pair", session, ["title": t("Pair a car"), "problem": t("No car is waiting with that code. Type the code the car says.")],
                status: .badRequest)
        case .limited(let seconds):
            return tooManyCodes(session, waitSeconds: seconds)
        }
    }

    // MARK: - Purchases

    private func buy(_ session: WebSession, _ fields: [String: String]) async throws -> Response {
        guard let provider, let index = Int(fields["product"] ?? ""), products.indices.contains(index) else {
            return try await devicesPage(session, notice: nil, problem: t("That product is not offered."))
        }
        let device = fields["device"] ?? ""
        guard try await store.devices(owner: session.owner).contains(where: { $0.device == device }) else {
            return try await devicesPage(session, notice: nil, problem: t("That car is not yours."))
        }
        let product = products[index]
        let payment = Payment(
            provider: provider.name, id: "pay_" + Self.random(), owner: session.owner, device: device,
            product: product.name, seconds: product.seconds, price: product.price, createdAtMs: now())
        try await store.startPayment(payment)
        logger.info("purchase started", metadata: ["owner": "\(session.owner)", "device": "\(device)", "payment": "\(payment.id)"])
        return redirect(provider.checkoutURL(for: payment))
    }

    /// The simulated provider's Pay / Decline, for the owner who started the payment: it sends
    /// its signed webhook to this server, as a real provider would, and sends the browser back.
    /// Only the webhook credits.
    private func simulatedDecision(
        _ session: WebSession, _ fields: [String: String], id: String,
        provider: SimulatedProvider
    ) async throws -> Response {
        guard let payment = try await store.payment(provider: provider.name, id: id), payment.status == .pending,
            payment.owner == session.owner, let base = webhookBase()
        else { return noSuchPayment(session) }
        let paid = fields["decision"] == "pay"
        let (body, header) = provider.event(paymentID: payment.id, paid: paid, eventID: "evt_" + Self.random(), timestamp: now() / 1000)
        var webhook = HTTPClientRequest(url: base + "/webhooks/payments/\(provider.name)")
        webhook.method = .POST
        webhook.headers.add(name: "Content-Type", value: "application/json")
        webhook.headers.add(name: WebhookHeader.name, value: header)
        webhook.body = .bytes(ByteBuffer(bytes: body))
        do {
            let answer = try await HTTPClient.shared.execute(webhook, timeout: .seconds(10))
            guard answer.status == .ok else { throw WebhookHeader.Failed(status: Int(answer.status.code)) }
        } catch {
            logger.error("simulated provider: the webhook was not taken: \(error)")
        }
        return redirect(paid ? "/?paid=1" : "/?declined=1")
    }

    private func webhook(_ request: Request, provider: any PaymentProvider) async throws -> Response {
        let body = (try? await request.body.collect(upTo: 64 * 1024)).map { Data($0.readableBytesView) }
        guard let body else { return Response(status: .contentTooLarge) }
        switch provider.readWebhook(signature: request.headers[.init(WebhookHeader.name)!], body: body, nowSeconds: now() / 1000) {
        case .failure(let refusal):
            noisy.log(logger, .warning, "refused a payment webhook: \(refusal)")
            return Response(status: .badRequest)
        case .success(let event):
            let credited = try await store.settlePayment(provider: provider.name, id: event.paymentID, paid: event.paid, nowMs: now())
            if credited {
                logger.notice("payment credited", metadata: ["payment": "\(event.paymentID)", "event": "\(event.id)"])
            } else {
                noisy.log(
                    logger, .notice, "a payment webhook changed nothing (declined, repeated or unknown)",
                    metadata: ["payment": "\(GuidanceText.loggable(event.paymentID))", "event": "\(GuidanceText.loggable(event.id))"])
            }
            return Response(status: .ok)
        }
    }

    // MARK: - Small rules

    /// Whom wrong codes are counted against: the peer's address, or behind a proxy on this
    /// machine (a loopback peer) the address the proxy names in `X-Real-IP`.
    static func address(_ request: Request, peer: String?) -> String {
        guard let peer else { return "unknown" }
        if LocalProxy.isLoopback(peer), let forwarded = request.headers[HTTPField.Name("X-Real-IP")!], forwarded.count <= 64 {
            return bucket(forwarded)
        }
        return bucket(peer)
    }

    /// An IPv6 client counts by its /64: one subscriber holds a whole /64, and each of its 2^64
    /// addresses must not get a budget of its own. IPv4 addresses (and anything else) as they are.
    static func bucket(_ address: String) -> String {
        var bytes = in6_addr()
        guard address.contains(":"), inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        let raw = withUnsafeBytes(of: &bytes) { Array($0) }
        // An IPv4 address written as IPv6 (::ffff:a.b.c.d) is that IPv4 address.
        if raw[0..<10].allSatisfy({ $0 == 0 }) && raw[10] == 0xff && raw[11] == 0xff {
            return raw[12..<16].map(String.init).joined(separator: ".")
        }
        return stride(from: 0, to: 8, by: 2).map { String(UInt16(raw[$0]) << 8 | UInt16(raw[$0 + 1]), radix: 16) }.joined(separator: ":")
            + "::/64"
    }

    static func address(_ request: Request, _ context: GuidanceRequestContext) -> String {
        address(request, peer: context.channel?.remoteAddress?.ipAddress)
    }

    /// The stored id of the session this request's cookie names (HummingbirdAuth's key, hashed).
    static func sessionID(_ request: Request) -> String? {
        request.cookies[sessionCookie].map { WebSessionRows.storedKey(sessionKeyPrefix + $0.value) }
    }

    /// A wait in seconds as whole minutes, rounded up.
    static func minutes(_ seconds: Int) -> Int {
        max(1, (seconds + 59) / 60)
    }

    static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        return DeviceCodes.newDeviceCode(using: &generator)
    }

    /// Constant-time comparison of two secrets.
    static func same(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    static func cleanLabel(_ text: String) -> String {
        String(
            text.filter { !$0.isNewline && $0.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7f } }
                .trimmingCharacters(in: .whitespaces).prefix(64))
    }

    static func normalizedEmail(_ text: String) -> String {
        String(text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased().prefix(254))
    }

    /// `2 h 5 min`, `45 min`, `30 s` (in the page's language).
    static func spoken(_ seconds: Int, _ t: PageText) -> String {
        if seconds >= 3600 { return t("{h} h {m} min", ["h": t.number(seconds / 3600), "m": t.number(seconds % 3600 / 60)]) }
        if seconds >= 60 { return t("{m} min", ["m": t.number(seconds / 60)]) }
        return t("{s} s", ["s": t.number(seconds)])
    }

}

/// The simulated provider's signature header.
enum WebhookHeader {
    static let name = "Provider-Signature"
    struct Failed: Error { let status: Int }
}

/// Devices unpaired at this instance: their access tokens are refused at the upgrade and their
/// live streams closed (4401) until the tokens would have expired anyway.
public final class UnpairedDevices: Sendable {
    private let devices = Mutex<Set<String>>([])
    public init() {}
    func add(_ device: String) { _ = devices.withLock { $0.insert(device) } }
    func contains(_ device: String) -> Bool { devices.withLock { $0.contains(device) } }
}
