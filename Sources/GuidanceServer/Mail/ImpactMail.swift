import Foundation
import GuidanceProtocol
import Logging
import NIOSSL
import NIOPosix
public import ServiceLifecycle
import Synchronization

/// Tells an owner by e-mail when a parked car of theirs recorded an impact, if they asked for it
/// on their settings page (``OwnerPreferences/impactMail``), through the relay `mail.*` names.
///
/// - Important: one mail per clip, ever: the first announcement of a `parking` clip that has a
///   `peakG` marks the clip in the store (``ClipStore/claimNotice(device:id:)``, a file made
///   with `O_EXCL`), and only the call that made the mark goes on. The car announces a clip on
///   every session; another session, a restart or another instance on the same clips folder
///   finds the mark. At most `mail.maxPerCarPerHour` per car (``Rate``): one over it is logged,
///   not queued. The queue is bounded: a mail that finds it full is dropped, counted and logged.
///   A failed send is tried again after each of ``Settings/retryDelays`` while the failure may
///   pass (``SMTPFailure/isTransient``), then logged and dropped.
public final class ImpactMail: Service, Sendable {
    public struct Settings: Sendable {
        var relay: SMTPClient.Relay
        var from: String
        var startTLS: SMTPClient.StateMachine.StartTLS
        var credentials: (username: String, password: String)?
        var tls: TLSConfiguration
        /// To connect, and for each reply.
        var timeout: Duration
        var maxPerCarPerHour: Int
        var ehloName: String
        /// `https://HOST` the owners' pages are reached at (`pairing.verificationURI`'s); nil: the
        /// links are paths only.
        var publicOrigin: String?
        var retryDelays: [Duration] = [.seconds(10), .seconds(60)]
        var queueLength = 64
    }

    let settings: Settings
    let owners: any PairingStore & OwnerStore
    let clips: any ClipStore
    let logger: Logger
    let now: @Sendable () -> Date
    private let jobs: AsyncStream<Job>
    private let queue: AsyncStream<Job>.Continuation
    private let rate: Mutex<Rate>
    private let counts = Mutex(Counts())
    private let droppedLog = LogLimit()
    private let overLimitLog = LogLimit()
    private let failureLog = LogLimit()

    /// What became of the mails so far (for tests and the log).
    struct Counts: Sendable, Equatable {
        var queued = 0
        var sent = 0
        var failed = 0
        var dropped = 0
        var overLimit = 0
    }

    var sofar: Counts { counts.withLock { $0 } }

    /// Who a car's impact mail goes to, and how their pages write times.
    struct Recipient: Sendable {
        var owner: Int64
        var address: String
        var carName: String
        var clock: OwnerClock
    }

    struct Job: Sendable {
        var device: String
        var clip: ClientMessage.Clip
        var recipient: Recipient
    }

    init(
        settings: Settings, owners: any PairingStore & OwnerStore, clips: any ClipStore, logger: Logger,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.settings = settings
        self.owners = owners
        self.clips = clips
        self.logger = logger
        self.now = now
        rate = Mutex(Rate(maxPerHour: settings.maxPerCarPerHour))
        (jobs, queue) = AsyncStream.makeStream(of: Job.self, bufferingPolicy: .bufferingOldest(settings.queueLength))
    }

    /// A clip a car announced, and the store took (`clip_have`): queues its mail if this is the
    /// first announcement of a parked car's impact and its owner asked for it. Never throws:
    /// whatever fails here is logged, and the car's session goes on.
    func noticed(_ clip: ClientMessage.Clip, device: String) async {
        guard clip.kind == "parking", clip.peakG != nil else { return }
        let what = "impact mail for clip \(clip.id)"
        let first: Bool
        do {
            first = try await NIOThreadPool.singleton.runIfActive { [clips] in try clips.claimNotice(device: device, id: clip.id) }
        } catch {
            failureLog.log(logger, .error, "\(what): cannot mark the clip as told: \(error)", metadata: ["device": "\(device)"])
            return
        }
        guard first else { return }
        let recipient: Recipient?
        do {
            recipient = try await self.recipient(device)
        } catch {
            failureLog.log(logger, .error, "\(what): cannot look up the car's owner: \(error)", metadata: ["device": "\(device)"])
            return
        }
        guard let recipient else {
            logger.debug("\(what): the car has no owner who asked for impact mails", metadata: ["device": "\(device)"])
            return
        }
        let stamp = StreamSession.now()
        guard rate.withLock({ $0.admit(device: device, now: stamp) }) else {
            counts.withLock { $0.overLimit += 1 }
            overLimitLog.log(
                logger, .warning,
                "\(what): not sent, the car had \(settings.maxPerCarPerHour) in the last hour (mail.maxPerCarPerHour)",
                metadata: ["device": "\(device)", "owner": "\(recipient.owner)"])
            return
        }
        switch queue.yield(Job(device: device, clip: clip, recipient: recipient)) {
        case .enqueued:
            counts.withLock { $0.queued += 1 }
            logger.info("\(what): queued for the car's owner", metadata: ["device": "\(device)", "owner": "\(recipient.owner)"])
        case .dropped, .terminated:
            let dropped = counts.withLock {
                $0.dropped += 1; return $0.dropped
            }
            droppedLog.log(
                logger, .warning, "\(what): dropped, \(settings.queueLength) mails wait already (\(dropped) dropped since the start)",
                metadata: ["device": "\(device)"])
        @unknown default:
            break
        }
    }

    /// The car's owner, if they asked for impact mails.
    func recipient(_ device: String) async throws -> Recipient? {
        guard let paired = try await owners.pairedDevice(device) else { return nil }
        let preferences = try await owners.preferences(owner: paired.owner)
        guard preferences.impactMail, let owner = try await owners.owner(id: paired.owner) else { return nil }
        return Recipient(
            owner: paired.owner, address: owner.email, carName: paired.label,
            clock: OwnerClock(timeZone: preferences.timeZone.flatMap(TimeZone.init(identifier:)), language: preferences.language))
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown { [self] in
            for await job in jobs { await deliver(job) }
        }
        queue.finish()
    }

    /// One mail: made, sent, and tried again while the failure may pass.
    func deliver(_ job: Job) async {
        let what = "impact mail for clip \(job.clip.id)"
        let metadata: Logger.Metadata = ["device": "\(job.device)", "owner": "\(job.recipient.owner)"]
        let message: [UInt8]
        do {
            message = try Self.message(job, settings: settings, date: now()).rendered()
        } catch {
            counts.withLock { $0.failed += 1 }
            logger.error("\(what): not sent: \(error)", metadata: metadata)
            return
        }
        let client = SMTPClient(relay: settings.relay, tls: settings.tls, timeout: settings.timeout, logger: logger)
        let conversation = SMTPClient.StateMachine.Settings(
            ehloName: settings.ehloName, startTLS: settings.startTLS, credentials: settings.credentials, from: settings.from,
            to: job.recipient.address)
        for attempt in 0...settings.retryDelays.count {
            switch await client.send(message, settings: conversation) {
            case .sent:
                counts.withLock { $0.sent += 1 }
                logger.notice("\(what): sent to the car's owner", metadata: metadata)
                return
            case .failed(let failure):
                guard failure.isTransient, attempt < settings.retryDelays.count, !Task.isCancelled else {
                    counts.withLock { $0.failed += 1 }
                    logger.error("\(what): not sent (\(attempt + 1) tries): \(failure)", metadata: metadata)
                    return
                }
                let delay = settings.retryDelays[attempt]
                logger.warning("\(what): try \(attempt + 1) failed: \(failure); trying again in \(delay)", metadata: metadata)
                try? await Task.sleep(for: delay)
            }
        }
    }
}
