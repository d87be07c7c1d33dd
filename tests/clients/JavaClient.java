// What a Java ERP connector does with java.net.http.HttpClient (tests/it/outside.rs runs it
// with `java JavaClient.java`, no build step): HTTP/2 over TLS (the client's default on
// https), a POST that expects 100-continue, and a client with an Authenticator set, as behind
// an authenticating proxy. One line per request on stdout.
//
//   java JavaClient.java <https base URL> <API key> <CA certificate PEM> <body> <small body>
//
// The 401 goes to a body under the HTTP/2 window (1 MiB): JDK 17's client does not take an
// answer that comes while flow control holds the rest of its body back (nginx sees the same).

import java.io.FileInputStream;
import java.net.Authenticator;
import java.net.PasswordAuthentication;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

public class JavaClient {
    public static void main(String[] args) throws Exception {
        String base = args[0], key = args[1];
        byte[] body = Files.readAllBytes(Path.of(args[3]));
        byte[] small = Files.readAllBytes(Path.of(args[4]));

        KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
        trust.load(null, null);
        try (FileInputStream ca = new FileInputStream(args[2])) {
            trust.setCertificateEntry("ca", CertificateFactory.getInstance("X.509").generateCertificate(ca));
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(trust);
        SSLContext tls = SSLContext.getInstance("TLS");
        tls.init(null, tmf.getTrustManagers(), null);

        HttpClient plain = HttpClient.newBuilder().sslContext(tls).version(HttpClient.Version.HTTP_2)
            .connectTimeout(Duration.ofSeconds(10)).build();
        long started = System.nanoTime();
        HttpRequest expecting = HttpRequest.newBuilder(URI.create(base + "/general-ledger-codes/v1"))
            .timeout(Duration.ofSeconds(60)).expectContinue(true)
            .header("x-api-key", key).header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
        try {
            HttpResponse<String> r = plain.send(expecting, HttpResponse.BodyHandlers.ofString());
            System.out.println("expect " + r.statusCode() + " " + r.version() + " "
                + (System.nanoTime() - started) / 1_000_000 + " ms");
        } catch (Exception e) {
            System.out.println("expect error " + e);
        }

        HttpClient proxied = HttpClient.newBuilder().sslContext(tls).version(HttpClient.Version.HTTP_2)
            .authenticator(new Authenticator() {
                @Override protected PasswordAuthentication getPasswordAuthentication() {
                    return new PasswordAuthentication("proxy-user", "proxy-password".toCharArray());
                }
            }).build();
        HttpRequest wrongKey = HttpRequest.newBuilder(URI.create(base + "/general-ledger-codes/v1"))
            .timeout(Duration.ofSeconds(60))
            .header("x-api-key", "not-a-key").header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofByteArray(small)).build();
        try {
            HttpResponse<String> r = proxied.send(wrongKey, HttpResponse.BodyHandlers.ofString());
            System.out.println("auth " + r.statusCode() + " "
                + r.headers().firstValue("www-authenticate").orElse("-") + " " + r.body());
        } catch (Exception e) {
            System.out.println("auth error " + e);
        }
    }
}
