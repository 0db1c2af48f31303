// Java's SunPKCS11 provider against libopencf.so (slot 0, the OpenCF metaslot): keystore
// aliases and certificates, key generation, signatures, ciphers, a MAC and a JSSE TLS
// handshake on 127.0.0.1 with the server key in the token. Every result the token produces
// is checked with Java's own software providers. Prints one PASS/FAIL/SKIP line per check.
//
//   java OpenCfJava.java CONFIG PIN ALIAS TLS_CERT_PEM
//
// CONFIG: a SunPKCS11 configuration file; ALIAS: a key entry already in the token whose
// certificate is TLS_CERT_PEM (made by the calling script).

import java.io.FileInputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.security.*;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.ECGenParameterSpec;
import java.security.spec.MGF1ParameterSpec;
import java.security.spec.PSSParameterSpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.Arrays;
import java.util.Collections;
import java.util.concurrent.*;
import javax.crypto.Cipher;
import javax.crypto.KeyGenerator;
import javax.crypto.Mac;
import javax.crypto.NoSuchPaddingException;
import javax.crypto.SecretKey;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.OAEPParameterSpec;
import javax.crypto.spec.PSource;
import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.*;

public class OpenCfJava {
    static int passed = 0, failed = 0;
    static Provider p11;

    interface Check { String run() throws Exception; }

    static void check(String name, Check c) {
        try {
            String detail = c.run();
            if (detail != null && detail.startsWith("SKIP:")) {
                System.out.println("SKIP " + name + " (" + detail.substring(5).trim() + ")");
            } else {
                System.out.println("PASS " + name + (detail == null || detail.isEmpty() ? "" : " (" + detail + ")"));
                passed++;
            }
        } catch (Throwable t) {
            System.out.println("FAIL " + name + ": " + t);
            for (Throwable cause = t.getCause(); cause != null; cause = cause.getCause()) {
                System.out.println("    caused by " + cause);
            }
            failed++;
        }
    }

    static void require(boolean ok, String what) {
        if (!ok) throw new IllegalStateException(what);
    }

    // The software provider's copy of a public key (proves nothing of the token is needed).
    static PublicKey softwarePublic(PublicKey k) throws Exception {
        return KeyFactory.getInstance(k.getAlgorithm().equals("EC") ? "EC" : "RSA")
                .generatePublic(new X509EncodedKeySpec(k.getEncoded()));
    }

    static String signVerify(String alg, KeyPair kp, PSSParameterSpec pss) throws Exception {
        byte[] data = "signed in the OpenCF token".getBytes(StandardCharsets.UTF_8);
        Signature s = Signature.getInstance(alg, p11);
        if (pss != null) s.setParameter(pss);
        s.initSign(kp.getPrivate());
        s.update(data);
        byte[] sig = s.sign();
        Signature v = Signature.getInstance(alg);
        require(v.getProvider() != p11, "verifier must be a software provider");
        if (pss != null) v.setParameter(pss);
        v.initVerify(softwarePublic(kp.getPublic()));
        v.update(data);
        require(v.verify(sig), "software verification of the token signature failed");
        return "verified by " + v.getProvider().getName();
    }

    public static void main(String[] args) throws Exception {
        String config = args[0];
        char[] pin = args[1].toCharArray();
        String alias = args[2];
        X509Certificate tlsCert;
        try (InputStream in = new FileInputStream(args[3])) {
            tlsCert = (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
        }

        check("SunPKCS11 configured with libopencf.so slot 0", () -> {
            p11 = Security.getProvider("SunPKCS11").configure(config);
            Security.addProvider(p11);
            return p11.getName();
        });
        if (p11 == null || Security.getProvider(p11.getName()) == null) {
            System.out.println("java: " + passed + " passed, " + (failed + 1) + " failed");
            System.exit(1);
        }

        KeyStore ks = KeyStore.getInstance("PKCS11", p11);
        check("KeyStore PKCS11 loads with the PIN", () -> { ks.load(null, pin); return ""; });
        check("KeyStore aliases include the token's key entry", () -> {
            java.util.List<String> aliases = Collections.list(ks.aliases());
            require(aliases.contains(alias), "aliases " + aliases + " lack " + alias);
            require(ks.isKeyEntry(alias), alias + " is not a key entry");
            return "aliases " + aliases;
        });
        check("KeyStore certificate is the one the script stored", () -> {
            Certificate c = ks.getCertificate(alias);
            require(tlsCert.equals(c), "certificate differs");
            return ((X509Certificate) c).getSubjectX500Principal().getName();
        });
        check("disabledMechanisms: SHA-1 is not offered by the token provider, SHA-256 is", () -> {
            MessageDigest.getInstance("SHA-256", p11);
            try {
                MessageDigest.getInstance("SHA-1", p11);
                throw new IllegalStateException("SHA-1 offered despite disabledMechanisms");
            } catch (NoSuchAlgorithmException expected) {
                return "NoSuchAlgorithmException for SHA-1";
            }
        });

        KeyPair[] rsa = new KeyPair[1], ec = new KeyPair[1];
        check("KeyPairGenerator RSA 2048 in the token", () -> {
            KeyPairGenerator g = KeyPairGenerator.getInstance("RSA", p11);
            g.initialize(2048);
            rsa[0] = g.generateKeyPair();
            return rsa[0].getPrivate().getClass().getSimpleName();
        });
        check("KeyPairGenerator EC secp256r1 in the token", () -> {
            KeyPairGenerator g = KeyPairGenerator.getInstance("EC", p11);
            g.initialize(new ECGenParameterSpec("secp256r1"));
            ec[0] = g.generateKeyPair();
            return ec[0].getPrivate().getClass().getSimpleName();
        });
        check("Signature SHA256withRSA", () -> signVerify("SHA256withRSA", rsa[0], null));
        check("Signature SHA256withECDSA", () -> signVerify("SHA256withECDSA", ec[0], null));
        check("Signature RSASSA-PSS (SHA-256, MGF1, salt 32)", () -> signVerify("RSASSA-PSS", rsa[0],
                new PSSParameterSpec("SHA-256", "MGF1", MGF1ParameterSpec.SHA256, 32, 1)));

        check("Cipher AES/GCM/NoPadding with a token AES key", () -> {
            KeyGenerator g = KeyGenerator.getInstance("AES", p11);
            g.init(256);
            SecretKey k = g.generateKey();
            byte[] iv = new byte[12];
            new SecureRandom().nextBytes(iv);
            byte[] plain = "AES-GCM in the OpenCF token".getBytes(StandardCharsets.UTF_8);
            Cipher c = Cipher.getInstance("AES/GCM/NoPadding", p11);
            c.init(Cipher.ENCRYPT_MODE, k, new GCMParameterSpec(128, iv));
            c.updateAAD("aad".getBytes(StandardCharsets.UTF_8));
            byte[] ct = c.doFinal(plain);
            Cipher d = Cipher.getInstance("AES/GCM/NoPadding", p11);
            d.init(Cipher.DECRYPT_MODE, k, new GCMParameterSpec(128, iv));
            d.updateAAD("aad".getBytes(StandardCharsets.UTF_8));
            require(Arrays.equals(plain, d.doFinal(ct)), "round trip differs");
            ct[0] ^= 1;
            d.init(Cipher.DECRYPT_MODE, k, new GCMParameterSpec(128, iv));
            d.updateAAD("aad".getBytes(StandardCharsets.UTF_8));
            try {
                d.doFinal(ct);
                throw new IllegalStateException("a forged ciphertext decrypted");
            } catch (javax.crypto.AEADBadTagException expected) {
                return "round trip, forgery rejected";
            }
        });
        check("Cipher RSA/ECB/OAEPPadding: software encrypts, the token decrypts", () -> {
            Cipher c;
            try {
                c = Cipher.getInstance("RSA/ECB/OAEPPadding", p11);
            } catch (NoSuchAlgorithmException | NoSuchPaddingException e) {
                return "SKIP: this JDK's SunPKCS11 has no RSA/ECB/OAEPPadding (" + e.getMessage() + ")";
            }
            byte[] plain = "OAEP for the token".getBytes(StandardCharsets.UTF_8);
            OAEPParameterSpec spec = new OAEPParameterSpec("SHA-1", "MGF1", MGF1ParameterSpec.SHA1,
                    PSource.PSpecified.DEFAULT);
            Cipher e = Cipher.getInstance("RSA/ECB/OAEPPadding");
            e.init(Cipher.ENCRYPT_MODE, softwarePublic(rsa[0].getPublic()), spec);
            byte[] ct = e.doFinal(plain);
            c.init(Cipher.DECRYPT_MODE, rsa[0].getPrivate(), spec);
            require(Arrays.equals(plain, c.doFinal(ct)), "decryption differs");
            return "";
        });
        check("Cipher RSA/ECB/PKCS1Padding: software encrypts, the token decrypts", () -> {
            byte[] plain = "PKCS#1 v1.5 for the token".getBytes(StandardCharsets.UTF_8);
            Cipher e = Cipher.getInstance("RSA/ECB/PKCS1Padding");
            e.init(Cipher.ENCRYPT_MODE, softwarePublic(rsa[0].getPublic()));
            Cipher d = Cipher.getInstance("RSA/ECB/PKCS1Padding", p11);
            d.init(Cipher.DECRYPT_MODE, rsa[0].getPrivate());
            require(Arrays.equals(plain, d.doFinal(e.doFinal(plain))), "decryption differs");
            return "";
        });
        check("Mac HmacSHA256 equals the software result", () -> {
            byte[] key = new byte[32];
            new SecureRandom().nextBytes(key);
            byte[] data = "HMAC in the OpenCF token".getBytes(StandardCharsets.UTF_8);
            Mac m = Mac.getInstance("HmacSHA256", p11);
            m.init(new SecretKeySpec(key, "HmacSHA256"));
            byte[] tag = m.doFinal(data);
            Mac s = Mac.getInstance("HmacSHA256");
            require(s.getProvider() != p11, "reference must be a software provider");
            s.init(new SecretKeySpec(key, "HmacSHA256"));
            require(Arrays.equals(tag, s.doFinal(data)), "tags differ");
            return "";
        });

        check("JSSE TLS handshake on 127.0.0.1, server key in the token", () -> tlsHandshake(ks, pin, tlsCert));

        System.out.println("java: " + passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    static String tlsHandshake(KeyStore ks, char[] pin, X509Certificate cert) throws Exception {
        KeyManagerFactory kmf = KeyManagerFactory.getInstance("PKIX");
        kmf.init(ks, pin);
        SSLContext serverCtx = SSLContext.getInstance("TLS");
        serverCtx.init(kmf.getKeyManagers(), null, null);

        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        trust.setCertificateEntry("opencf", cert);
        TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
        tmf.init(trust);
        SSLContext clientCtx = SSLContext.getInstance("TLS");
        clientCtx.init(null, tmf.getTrustManagers(), null);

        InetAddress loopback = InetAddress.getByName("127.0.0.1");
        ExecutorService pool = Executors.newSingleThreadExecutor();
        StringBuilder out = new StringBuilder();
        for (String protocol : new String[] {"TLSv1.3", "TLSv1.2"}) {
            try (SSLServerSocket server = (SSLServerSocket) serverCtx.getServerSocketFactory()
                    .createServerSocket(0, 1, loopback)) {
                server.setSoTimeout(20000);
                server.setEnabledProtocols(new String[] {protocol});
                Future<String> served = pool.submit(() -> {
                    try (SSLSocket s = (SSLSocket) server.accept()) {
                        s.setSoTimeout(20000);
                        int b = s.getInputStream().read();
                        s.getOutputStream().write(b + 1);
                        s.getOutputStream().flush();
                        // The client closes first; wait for its close_notify.
                        require(s.getInputStream().read() == -1, "client did not close");
                        return s.getSession().getCipherSuite();
                    }
                });
                String protocolUsed;
                try (SSLSocket c = (SSLSocket) clientCtx.getSocketFactory()
                        .createSocket(loopback, server.getLocalPort())) {
                    c.setSoTimeout(20000);
                    SSLParameters params = c.getSSLParameters();
                    params.setEndpointIdentificationAlgorithm("HTTPS");
                    params.setServerNames(Collections.singletonList(new SNIHostName("localhost")));
                    c.setSSLParameters(params);
                    c.startHandshake();
                    OutputStream o = c.getOutputStream();
                    o.write(41);
                    o.flush();
                    require(c.getInputStream().read() == 42, "echo differs");
                    require(c.getSession().getPeerCertificates()[0].equals(cert), "peer certificate differs");
                    protocolUsed = c.getSession().getProtocol();
                }
                require(protocol.equals(protocolUsed), "negotiated " + protocolUsed);
                out.append(protocolUsed).append(' ').append(served.get(30, TimeUnit.SECONDS)).append("; ");
            }
        }
        pool.shutdownNow();
        return out.toString().trim();
    }
}
