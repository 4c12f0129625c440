import GuidanceProtocol
public import AsyncHTTPClient
public import Foundation
import NIOCore
import NIOFoundationCompat
public import NIOHTTP1

/// Google's Gemini API (``GeminiAPI``): the segment itself, inline, as `video/mp4`; or, when
/// `transcode` is set (a service that refuses HEVC), the segment made H.264 first.
public struct GeminiEndpoint: ModelEndpoint {
    public let name = "gemini"
    public let endpoint: String
    public let model: String
    let apiKey: String
    let transcode: (@Sendable (Data) async throws -> Data)?

    public init(endpoint: String, model: String, apiKey: String, transcode: (@Sendable (Data) async throws -> Data)?) {
        self.endpoint = endpoint
        self.model = model
        self.apiKey = apiKey
        self.transcode = transcode
    }

    public func request(for segment: ReceivedSegment) async throws -> HTTPClientRequest {
        let video = if let transcode { try await transcode(segment.data) } else { segment.data }
        var request = HTTPClientRequest(url: GeminiAPI.url(endpoint: endpoint, model: model))
        request.method = .POST
        request.headers.add(name: "x-goog-api-key", value: apiKey)
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(
            ByteBuffer(
                data: try GeminiAPI.requestBody(
                    video: video, mimeType: "video/mp4", locale: segment.locale,
                    motion: ModelAnswer.Motion(segment.header.gps))))
        return request
    }

    public func parse(_ body: Data) -> (answer: ModelAnswer?, usage: ModelTokens?) { GeminiAPI.parse(body) }

    public func retryDelay(headers: HTTPHeaders, body: Data) -> Duration? {
        GeminiAPI.retryDelay(errorBody: body) ?? HostedModelAnalyzer.retryAfter(headers)
    }
}

/// An OpenAI-compatible chat completions endpoint (``OpenAIChatAPI``) with a few keyframes of the
/// segment as JPEG images. The key is optional: a model served on the same machine needs none.
public struct OpenAIChatEndpoint: ModelEndpoint {
    public let name = "openai"
    public let endpoint: String
    public let model: String
    let apiKey: String?
    let keyframes: @Sendable (Data) async throws -> [Data]

    public init(endpoint: String, model: String, apiKey: String?, keyframes: @escaping @Sendable (Data) async throws -> [Data]) {
        self.endpoint = endpoint
        self.model = model
        self.apiKey = apiKey
        self.keyframes = keyframes
    }

    public func request(for segment: ReceivedSegment) async throws -> HTTPClientRequest {
        let jpegs = try await keyframes(segment.data)
        var request = HTTPClientRequest(url: OpenAIChatAPI.url(endpoint: endpoint))
        request.method = .POST
        if let apiKey { request.headers.add(name: "authorization", value: "Bearer \(apiKey)") }
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(
            ByteBuffer(
                data: try OpenAIChatAPI.requestBody(
                    model: model, jpegs: jpegs, locale: segment.locale,
                    motion: ModelAnswer.Motion(segment.header.gps))))
        return request
    }

    public func parse(_ body: Data) -> (answer: ModelAnswer?, usage: ModelTokens?) { OpenAIChatAPI.parse(body) }

    public func retryDelay(headers: HTTPHeaders, body: Data) -> Duration? { HostedModelAnalyzer.retryAfter(headers) }
}
