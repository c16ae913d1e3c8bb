# Build SpecChat for Windows from the repository's venv (run in PowerShell on Windows):
#   dist\specchat\specchat.exe              the app (double-click; no console window)
#   dist\specchat-windows-x64.zip           that folder, zipped for download
#
#   powershell -ExecutionPolicy Bypass -File packaging\build-windows.ps1 [-Python path] [-SelfTest]
#
# llama-cpp-python builds llama.cpp from source: it needs the Visual Studio Build Tools (C++)
# and CMake. For an NVIDIA GPU build, see packaging\README.md (CMAKE_ARGS="-DGGML_CUDA=on").
#
# The exe has no console, so --self-test prints nothing: its exit code is the verdict and its
# result line goes to the log, %LOCALAPPDATA%\specchat\Logs\specchat.log.
param(
    [string]$Python = ".venv\Scripts\python.exe",
    [switch]$SelfTest
)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")
$watch = [System.Diagnostics.Stopwatch]::StartNew()
function Step($text) { Write-Host ("== {0:N0}s: {1}" -f $watch.Elapsed.TotalSeconds, $text) }

Step "pyinstaller"
& $Python -m PyInstaller --noconfirm --clean packaging\specchat.spec --distpath dist --workpath build\pyinstaller
if ($LASTEXITCODE -ne 0) { throw "PyInstaller failed (exit code $LASTEXITCODE)" }

$exe = "dist\specchat\specchat.exe"
$version = Start-Process -FilePath $exe -ArgumentList "--version" -Wait -PassThru -NoNewWindow
if ($version.ExitCode -ne 0) { throw "$exe --version failed (exit code $($version.ExitCode))" }

if ($SelfTest) {
    Step "self-test"
    $run = Start-Process -FilePath $exe -ArgumentList "--self-test" -Wait -PassThru -NoNewWindow
    $log = Join-Path $env:LOCALAPPDATA "specchat\Logs\specchat.log"
    if (Test-Path $log) { Get-Content $log | Select-String "specchat self-test" | Select-Object -Last 1 }
    if ($run.ExitCode -ne 0) { throw "self-test failed (exit code $($run.ExitCode)); see $log" }
}

Step "zip"
$zip = "dist\specchat-windows-x64.zip"
if (Test-Path $zip) { Remove-Item $zip }
Compress-Archive -Path "dist\specchat" -DestinationPath $zip
Get-Item "dist\specchat\specchat.exe", $zip | Format-Table Name, Length
Step "done"
